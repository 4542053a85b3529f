"""Checkpoints, saved and loaded safely: `last.pt` (what --resume needs) and `best.pt` (the best
weights) in a run directory. They go through `atomic_write` (written, flushed to disk, renamed),
so an interruption never leaves a truncated one, and load with `weights_only=True`, so a crafted
one cannot run code.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch

from mt.errors import UserError
from mt.files import atomic_write, sha256_of

LAST, BEST = "last.pt", "best.pt"


def fit_weights(model: torch.nn.Module, state: dict, path: Path, problem: str) -> None:
    """Load a checkpoint's weights into `model`, or say in one line that `problem` (what does not fit)."""
    try:
        model.load_state_dict(state["model"])
    except (RuntimeError, KeyError) as e:
        raise UserError(f"{path} {problem} ({str(e).splitlines()[-1].strip()[:160]})") from None


def run_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint a run directory is read by: best.pt, else last.pt; None when it has neither."""
    return next((run_dir / name for name in (BEST, LAST) if (run_dir / name).is_file()), None)


def fingerprint(path: Path) -> str:
    """A checkpoint file's SHA-256: which model a file kept beside it (a calibrator) belongs to."""
    return sha256_of(path)


def run_and_checkpoint(run: str | Path) -> tuple[Path, Path | None]:
    """(run directory, the checkpoint it is read by) of a run directory or of a checkpoint file in one."""
    run = Path(run)
    return (run.parent, run) if run.is_file() else (run, run_checkpoint(run))


def save_checkpoint(path: Path, state: dict) -> None:
    atomic_write(path, lambda tmp: torch.save(state, tmp))


def load_checkpoint(path: Path) -> dict:
    """A checkpoint's contents, loaded safely: tensors and plain Python types only. A file whose
    pickle asks for anything else (which could run code) is refused, and a damaged one named."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise UserError(f"{path}: no such checkpoint") from None
    except pickle.UnpicklingError:
        raise UserError(
            f"{path} holds objects other than tensors and plain values; refusing to load it, since that "
            "could run code (load only checkpoints written by mt.train)"
        ) from None
    except (RuntimeError, EOFError, ValueError, OSError) as e:
        hint = "; --resume can restart from best.pt's weights only by training anew" if path.name == LAST else ""
        reason = str(e).splitlines()[0].split(". ")[0][:120]  # the loader's first sentence, not its advice
        raise UserError(
            f"{path} is damaged or not a checkpoint ({reason}); copy it again or use another checkpoint{hint}"
        ) from None
    if not isinstance(state, dict):
        raise UserError(f"{path} is not a checkpoint written by mt.train")
    return state

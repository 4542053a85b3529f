"""The run directory: resolved config, tokenizer, `last` and `best` checkpoints, metrics.jsonl.

Everything `translate` and `generate` need is inside it. Checkpoints go through `atomic_write`
(written, flushed to disk, renamed), so an interruption never leaves a truncated one, and they
load with `weights_only=True`, so a crafted one cannot run code.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch

from mt.config import Config, config_from_dict
from mt.errors import UserError
from mt.files import atomic_write
from mt.model import build_model
from mt.tokenizer import Tokenizer, load_tokenizer

LAST, BEST = "last.pt", "best.pt"


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
        raise UserError(f"{path} holds objects other than tensors and plain values; refusing to load it, since that "
                        "could run code (load only checkpoints written by mt.train)") from None
    except (RuntimeError, EOFError, ValueError, OSError) as e:
        hint = "; --resume can restart from best.pt's weights only by training anew" if path.name == LAST else ""
        raise UserError(f"{path} is damaged or not a checkpoint ({str(e).splitlines()[0][:120]}); "
                        f"copy it again or use another checkpoint{hint}") from None
    if not isinstance(state, dict):
        raise UserError(f"{path} is not a checkpoint written by mt.train")
    return state


def load_run(run_dir: str | Path, device: torch.device | str = "cpu", missing_hint: str = ""):
    """Load (config, tokenizer, model in eval mode) from a run directory (`best` if present, else
    `last`) or from one checkpoint file inside it (e.g. RUN_DIR/averaged.pt)."""
    run_dir = Path(run_dir)
    if run_dir.is_file():
        run_dir, path = run_dir.parent, run_dir
    else:
        path = next((run_dir / n for n in (BEST, LAST) if (run_dir / n).is_file()), None)
    if path is None:
        raise UserError(f"no trained model in {run_dir}{missing_hint}")
    state = load_checkpoint(path)
    cfg: Config = config_from_dict(state["config"], str(path))
    tokenizer: Tokenizer = load_tokenizer(run_dir)
    model = build_model(cfg, tokenizer.vocab_size)
    try:
        model.load_state_dict(state["model"])
    except (RuntimeError, KeyError) as e:
        raise UserError(f"{path} does not fit the model its config and {run_dir}'s tokenizer describe "
                        f"({str(e).splitlines()[-1].strip()[:160]}); was a file of the run replaced?") from None
    return cfg, tokenizer, model.to(device).eval()

"""The run directory: resolved config, tokenizer, `last` and `best` checkpoints, metrics.jsonl.

Everything `translate` and `generate` need is inside it. Files are written to a temporary name
and renamed, so an interruption never leaves a truncated checkpoint.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from mt.config import Config, config_from_dict
from mt.errors import UserError
from mt.model import build_model
from mt.tokenizer import Tokenizer, load_tokenizer

LAST, BEST = "last.pt", "best.pt"


def atomic_write(path: Path, write: Callable[[str], None]) -> None:
    """Call write(temporary_name), then rename it over `path`: readers never see a partial file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_checkpoint(path: Path, state: dict) -> None:
    atomic_write(path, lambda tmp: torch.save(state, tmp))


def load_checkpoint(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def load_run(run_dir: str | Path, device: torch.device | str = "cpu", missing_hint: str = ""):
    """Load (config, tokenizer, model in eval mode) from a run directory: `best` if present, else `last`."""
    run_dir = Path(run_dir)
    path = next((run_dir / n for n in (BEST, LAST) if (run_dir / n).is_file()), None)
    if path is None:
        raise UserError(f"no trained model in {run_dir}{missing_hint}")
    state = load_checkpoint(path)
    cfg: Config = config_from_dict(state["config"], str(path))
    tokenizer: Tokenizer = load_tokenizer(run_dir)
    model = build_model(cfg, tokenizer.vocab_size)
    model.load_state_dict(state["model"])
    return cfg, tokenizer, model.to(device).eval()

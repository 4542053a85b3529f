"""Fine-tuning: a run that starts from another run's weights and tokenizer (`train.init_from`).

The recipe loader has already taken the model and tokenizer sections from that run (and refused
keys that disagree, mt.config); here the tokenizer and the weights are taken too. The optimizer,
the schedule and the step count start fresh. Once the new run has a last.pt, --resume restores
from it alone, so resuming a fine-tuning run is exact like any other.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from mt.checkpoint import BEST, LAST, fit_weights, load_checkpoint, run_checkpoint
from mt.config import Config, init_source
from mt.errors import UserError


def checkpoint_path(init_from: str) -> Path:
    """The checkpoint a train.init_from path means: the file itself, or a run's best.pt (else last.pt)."""
    run_dir, _ = init_source(init_from)
    origin = Path(init_from)
    if origin.is_file():
        return origin
    found = run_checkpoint(run_dir)
    if found is None:
        raise UserError(f"train.init_from: {run_dir} holds no {BEST} or {LAST} to start from")
    return found


def run_dir(cfg: Config) -> Path | None:
    """The run directory a fine-tuning run starts from (its tokenizer's), or None."""
    return init_source(cfg.train.init_from)[0] if cfg.train.init_from else None


def load_weights(model: torch.nn.Module, cfg: Config, log=print) -> None:
    """Copy the starting weights into `model` (built from the inherited sections) and say so."""
    path = checkpoint_path(cfg.train.init_from)
    state = load_checkpoint(path)
    fit_weights(model, state, path, "(train.init_from) does not fit the model its run's config describes")
    step = state.get("step")
    log(
        f"fine-tuning from {path}{f' (step {step})' if step else ''}: its weights, tokenizer and model shape; "
        "optimizer and schedule start fresh",
        file=sys.stderr,
    )

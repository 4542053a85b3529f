"""A trained run loaded for inference: its config, tokenizer and model (or models, as an ensemble)
rebuilt from the run directory alone."""

from __future__ import annotations

from pathlib import Path

import torch

from mt.checkpoint import fit_weights, load_checkpoint, run_checkpoint
from mt.config import Config, config_from_dict
from mt.cpu import heap
from mt.data.tokenizer import Tokenizer, load_tokenizer
from mt.errors import UserError
from mt.inference.quantize import quantize_int8
from mt.model import build_model

DEFAULT_MODEL = "runs/fr_en"


def load_run(run_dir: str | Path, device: torch.device | str = "cpu", missing_hint: str = ""):
    """Load (config, tokenizer, model in eval mode) from a run directory (`best` if present, else
    `last`) or from one checkpoint file inside it (e.g. RUN_DIR/averaged.pt)."""
    run_dir = Path(run_dir)
    if run_dir.is_file():
        run_dir, path = run_dir.parent, run_dir
    else:
        path = run_checkpoint(run_dir)
    if path is None:
        raise UserError(f"no trained model in {run_dir}{missing_hint}")
    state = load_checkpoint(path)
    cfg: Config = config_from_dict(state["config"], str(path))
    tokenizer: Tokenizer = load_tokenizer(run_dir)
    model = build_model(cfg, tokenizer.vocab_size)
    fit_weights(
        model, state, path, f"does not fit the model its config and {run_dir}'s tokenizer describe (a file replaced?)"
    )
    return cfg, tokenizer, model.to(device).eval()


def load_models(run_dirs, device: torch.device, quantize: str | None):
    """(cfg, tokenizer, models) for one run or an ensemble of runs sharing one vocabulary."""
    run_dirs = [run_dirs] if isinstance(run_dirs, (str, Path)) else list(run_dirs)
    hint = "; train one with: python -m mt.train recipes/fr_en.yaml" if str(run_dirs[0]) == DEFAULT_MODEL else ""
    loaded = [load_run(run_dir, device, hint) for run_dir in run_dirs]
    cfg, tokenizer, _ = loaded[0]
    for run_dir, (cfg_i, tokenizer_i, _) in zip(run_dirs, loaded):
        if cfg_i.model.arch != "transformer":
            raise UserError(
                f"{run_dir} holds a {cfg_i.model.arch} language model; use python -m mt.generate --model {run_dir}"
            )
        if tokenizer_i.fingerprint() != tokenizer.fingerprint():
            raise UserError(
                f"{run_dir} has another vocabulary than {run_dirs[0]}; an ensemble needs one shared tokenizer"
            )
    models = [quantize_int8(model) if quantize == "int8" else model for _, _, model in loaded]
    del loaded
    heap.give_back()  # the checkpoints read and, with int8, the fp32 weights replaced
    return cfg, tokenizer, models

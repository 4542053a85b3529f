"""AdamW with weight decay on matrices only, and the learning-rate schedule as a pure function."""

import math

import torch

from mt.config import TrainConfig


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},  # biases, LayerNorms
    ]
    # Fused: one kernel per step for all parameters, on CUDA and (since PyTorch 2.4) on CPU alike.
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, cfg.beta2), fused=True)


Anchor = tuple[int, float]  # (step, cosine progress) where a re-made step plan took over


def lr_at(step: int, cfg: TrainConfig, total_steps: int | None = None, anchor: Anchor | None = None) -> float:
    """Learning rate for optimizer step `step` (0-based): linear warmup, then cosine or 1/sqrt decay.
    The cosine runs to `total_steps`: `max_steps`, or the step plan a time budget was turned into
    (mt.training.stopping), so the schedule is a function of the step alone and resumes exactly.
    `anchor` (step, progress) is where a re-made plan took over: from there the cosine spreads what
    it had left over the new plan's steps, so the rate does not jump."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "inverse_sqrt":
        return cfg.lr * math.sqrt(max(cfg.warmup_steps, 1) / (step + 1))
    min_lr = cfg.lr / 10 if cfg.min_lr is None else cfg.min_lr
    progress = cosine_progress(step, cfg, total_steps, anchor)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (cfg.lr - min_lr)


def cosine_progress(step: int, cfg: TrainConfig, total_steps: int | None, anchor: Anchor | None) -> float:
    """How far along the cosine `step` is, from 0 at the end of warm-up to 1 at `total_steps`."""
    end = cfg.max_steps if total_steps is None else total_steps
    from_step, from_progress = anchor or (cfg.warmup_steps, 0.0)  # a first plan starts at warm-up's end
    return min(1.0, from_progress + (1.0 - from_progress) * (step - from_step) / max(1, end - from_step))

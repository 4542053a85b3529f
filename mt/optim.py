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


def lr_at(step: int, cfg: TrainConfig, time_spent: float = 0.0) -> float:
    """Learning rate for optimizer step `step` (0-based): linear warmup, then cosine or 1/sqrt decay.
    The cosine runs to whichever end comes first: `max_steps`, or the time budget, of which
    `time_spent` is the fraction used; so a run cut short by `train.max_minutes` still anneals,
    however fast the machine is."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "inverse_sqrt":
        return cfg.lr * math.sqrt(max(cfg.warmup_steps, 1) / (step + 1))
    min_lr = cfg.lr / 10 if cfg.min_lr is None else cfg.min_lr
    progress = min(1.0, max((step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps), time_spent))
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (cfg.lr - min_lr)

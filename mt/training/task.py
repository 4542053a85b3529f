"""What the training loop needs from a task (translation, language modelling), written down once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import torch


class Task(Protocol):
    """Data, loss, evaluation and resumable state for one kind of model. `TranslationTask` and
    `LanguageModelTask` implement it; `mt.training.trainer.Trainer` uses nothing else."""

    best_metric: str  # the evaluate() key that picks best.pt
    higher_is_better: bool

    @property
    def vocab_size(self) -> int: ...

    def batches_per_epoch(self) -> int:
        """Micro-batches (over all ranks) that make one pass over the training data: the plan's epochs."""
        ...

    def train_batches(self) -> Iterator[Any]:
        """Endless training batches on the training device; closing it stops any prefetching."""
        ...

    def batch_tokens(self, batch: Any) -> int:
        """Target tokens in a batch (the loss's denominator)."""
        ...

    def loss(self, model: torch.nn.Module, batch: Any, label_smoothing: float = 0.0) -> torch.Tensor:
        """Mean loss per target token of `batch`."""
        ...

    def evaluate(self, model: torch.nn.Module, autocast) -> dict:
        """Validation metrics, `best_metric` among them."""
        ...

    def state_dict(self) -> dict:
        """Where the training data has got to, in plain types and tensors."""
        ...

    def load_state_dict(self, state: dict) -> None: ...

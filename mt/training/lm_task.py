"""The language-modelling task: a plain-text corpus, random contiguous blocks, next-token loss.

The first 90% of the text trains, the last 10% validates. The whole corpus is encoded once and
kept on the training device as one tensor, so a batch is a single gather with no host copies.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch

from mt.config import Config
from mt.data.plain_text import prepare_text, split_text
from mt.errors import UserError
from mt.loss import token_loss
from mt.runtime import Runtime
from mt.training.distributed import World


class LanguageModelTask:
    """Batches, loss and evaluation for decoder-only models (gpt, bigram)."""

    best_metric, higher_is_better = "val_loss", False

    def __init__(self, cfg: Config, runtime: Runtime, tokenizer_from: Path | None, world: World = World()):
        device = runtime.device
        text = prepare_text(cfg.data.corpus, cfg.tokenizer, cfg.seed, tokenizer_from)
        self.tokenizer, self.world = text.tokenizer, world
        train, val = split_text(text.ids)
        self.splits = {"train": train.to(device), "val": val.to(device)}
        self.block_size, self.batch_size, self.device = cfg.data.block_size, cfg.train.batch_size, device
        self.eval_batches, self.seed = cfg.train.eval_batches, cfg.seed
        shortest = min(len(s) for s in self.splits.values())
        if shortest <= self.block_size:
            raise UserError(
                f"data.block_size {self.block_size} is not shorter than the validation text "
                f"({shortest} tokens); lower it"
            )
        self.generator = torch.Generator().manual_seed(cfg.seed)  # the training batches' only randomness
        self.offsets = torch.arange(self.block_size + 1, device=device)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def batch(
        self, split: str, generator: torch.Generator, world: World = World()
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random blocks; under torchrun one global batch is drawn and each rank takes its slice,
        so N processes see exactly what one process with N times the batch would."""
        data = self.splits[split]
        starts = torch.randint(len(data) - self.block_size, (self.batch_size * world.size, 1), generator=generator)
        starts = starts[world.rank * self.batch_size : (world.rank + 1) * self.batch_size]
        chunk = data[starts.to(self.device, non_blocking=True) + self.offsets]  # (B, T + 1)
        return chunk[:, :-1], chunk[:, 1:]

    def batches_per_epoch(self) -> int:
        """Batches of random blocks that hold as many tokens as the training text."""
        return max(1, len(self.splits["train"]) // (self.block_size * self.batch_size))

    def train_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            yield self.batch("train", self.generator, self.world)

    def batch_tokens(self, batch) -> int:
        return batch[0].numel()

    def loss(self, model, batch, label_smoothing: float = 0.0) -> torch.Tensor:
        x, y = batch
        return token_loss(model(x), y, label_smoothing)

    @torch.no_grad()
    def evaluate(self, model, autocast) -> dict:
        """Mean loss over the same `eval_batches` batches of each split at every evaluation."""
        results = {}
        for split in ("train", "val"):
            generator = torch.Generator().manual_seed(self.seed + 1)
            total = torch.zeros((), device=self.device)
            for _ in range(self.eval_batches):
                with autocast:
                    total += self.loss(model, self.batch(split, generator))
            results[f"{split}_loss"] = total.item() / self.eval_batches
        return results

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])

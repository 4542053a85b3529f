"""The language-modelling task: a plain-text corpus, random contiguous blocks, next-token loss.

The first 90% of the text trains, the last 10% validates. The whole corpus is encoded once and
kept on the training device as one tensor, so a batch is a single gather with no host copies.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import torch

from mt.config import Config
from mt.data import catalog
from mt.data.tokenizer import Tokenizer, learn_tokenizer, load_tokenizer
from mt.errors import UserError
from mt.loss import token_loss
from mt.runtime import Runtime
from mt.training import init_from
from mt.training.distributed import World

TEXT_FILES = {"tinyshakespeare": "input.txt"}


def read_corpus_text(corpus: str) -> str:
    """The text of a catalog corpus (`tinyshakespeare`) or of a UTF-8 file at the path `corpus`."""
    if corpus in TEXT_FILES:
        path = catalog.corpus_file(corpus, TEXT_FILES[corpus])
    elif Path(corpus).is_file():
        path = Path(corpus)
    else:
        raise UserError(
            f"data.corpus '{corpus}' is neither a catalog text ({', '.join(TEXT_FILES)}) nor an existing file"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        line = path.read_bytes()[: e.start].count(b"\n") + 1
        raise UserError(f"{path} line {line}: invalid UTF-8 ({e.reason}); fix or re-encode the file") from None
    if not text.strip():
        raise UserError(f"{path} holds no text to learn from")
    return text


def split_text(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoded corpus as (train, validation): its first 90% and the rest."""
    n_train = int(0.9 * len(ids))
    return ids[:n_train], ids[n_train:]


class LanguageModelTask:
    """Batches, loss and evaluation for decoder-only models (gpt, bigram)."""

    best_metric, higher_is_better = "val_loss", False

    def __init__(self, cfg: Config, run_dir: Path, runtime: Runtime, reuse_tokenizer: bool, world: World = World()):
        device = runtime.device
        text = read_corpus_text(cfg.data.corpus)
        self.world = world
        if reuse_tokenizer:
            self.tokenizer: Tokenizer = load_tokenizer(run_dir)
        elif cfg.train.init_from:
            self.tokenizer = init_from.tokenizer(cfg)
        else:
            lines = [line for line in text.splitlines() if line.strip()]
            sample = (lambda n: [text]) if cfg.tokenizer.kind == "char" else (lambda n: lines[:n])  # noqa: E731
            content = hashlib.sha256(text.encode()).hexdigest()
            self.tokenizer = learn_tokenizer(
                cfg.tokenizer, sample, len(lines), content, cfg.seed, catalog.data_dir() / "cache", "data.corpus"
            )
        if world.is_main:
            self.tokenizer.save(run_dir)
        ids = torch.tensor(self.tokenizer.encode(text), dtype=torch.long)
        train, val = split_text(ids)
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

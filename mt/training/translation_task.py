"""The translation task: parallel corpora, token-budget batches, loss, validation loss and BLEU."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import sacrebleu
import torch

from mt.config import Config
from mt.data.batching import collate, prefetch, shard, token_batches
from mt.data.corpora import EncodedCorpus
from mt.data.parallel import prepare_parallel
from mt.data.tokenizer import SentencePieceTokenizer
from mt.runtime import Runtime
from mt.training.distributed import World


def to_device(batch: dict, device: torch.device) -> dict:
    """Tensors to `device`; from page-locked memory the copy does not wait for the GPU."""
    return {k: v.to(device, non_blocking=v.is_pinned()) if torch.is_tensor(v) else v for k, v in batch.items()}


class TranslationTask:
    """Batches, loss and evaluation for the encoder-decoder Transformer."""

    best_metric, higher_is_better = "val_bleu", True

    def __init__(self, cfg: Config, runtime: Runtime, tokenizer_from: Path | None, world: World = World()):
        d, device = cfg.data, runtime.device
        data = prepare_parallel(d, cfg.tokenizer, cfg.seed, tokenizer_from, sys.stderr if world.is_main else None)
        self.tokenizer, self.train, self.mixture, self.valid_sets = data
        self.cfg, self.world, self.runtime, self.device = cfg, world, runtime, device
        self.max_tokens, self.max_len, self.seed = d.max_tokens, d.max_len, cfg.seed
        # Tensor cores and torch.compile want few, aligned shapes; on CPU padding is only waste.
        # (multiple, limit): within the model's positions, <END>/<START> included.
        self.padding = (8 if device.type == "cuda" or cfg.train.compile else 1, d.max_len + 1)
        self.sample_alpha = cfg.tokenizer.sampling_alpha if isinstance(self.tokenizer, SentencePieceTokenizer) else 0.0
        self.epoch, self.batch_in_epoch = 0, 0  # where the batches handed to training have got to

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def _sampled(self, rows: np.ndarray, epoch: int, index: int) -> tuple[list, list]:
        """Subword regularization: a fresh segmentation of each pair, drawn from a generator seeded
        by (seed, rank, epoch, batch), so `--resume` sees the very batches an uninterrupted run does."""
        rng = np.random.default_rng([self.seed, self.world.rank, epoch, index])
        return tuple(
            self.tokenizer.sample_encode_batch(self.train.texts(rows, side), self.sample_alpha, rng)
            for side in ("src", "tgt")
        )

    def _batch(self, rows: np.ndarray, epoch: int, index: int) -> dict:
        if self.sample_alpha > 0:
            src, tgt = self._sampled(rows, epoch, index)
            # A sampled segmentation can be longer than the one the length filter saw: keep the pairs
            # that still fit the model's positions, or the deterministic ones if none does.
            keep = [j for j, (s, t) in enumerate(zip(src, tgt)) if s and t and max(len(s), len(t)) <= self.max_len]
            if keep:
                batch = collate([src[j] for j in keep], [tgt[j] for j in keep], *self.padding)
            else:
                batch = collate(*self.train.ids(rows), *self.padding)
        else:
            batch = collate(*self.train.ids(rows), *self.padding)
        if self.device.type == "cuda":  # page-locked, so the copy to the GPU can overlap compute
            batch = {k: v.pin_memory() if torch.is_tensor(v) else v for k, v in batch.items()}
        return batch

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """Epoch `epoch`'s batches: positions among the kept training pairs."""
        if self.mixture is None:
            return token_batches(self.train.src_lens, self.train.tgt_lens, self.max_tokens, self.seed + epoch)
        pairs = self.mixture.epoch(epoch)
        lens = self.train.src_lens[pairs], self.train.tgt_lens[pairs]
        return [pairs[b] for b in token_batches(*lens, self.max_tokens, self.seed + epoch)]

    def batches_per_epoch(self) -> int:
        """Batches in an epoch, over all ranks (the token budget cuts about as many every epoch)."""
        return len(self.epoch_batches(self.epoch))

    def _epochs(self, epoch: int, batch_in_epoch: int) -> Iterator[tuple[dict, int, int]]:
        """Endless epochs from (epoch, batch_in_epoch) on; each batch comes with the position
        after it."""
        while True:
            batches = shard(self.epoch_batches(epoch), self.world.rank, self.world.size)
            for i in range(batch_in_epoch, len(batches)):
                yield self._batch(batches[i], epoch, i), epoch, i + 1
            epoch, batch_in_epoch = epoch + 1, 0

    def train_batches(self) -> Iterator[dict]:
        """Endless epochs; each covers every pair once, in batches shuffled by (seed, epoch) and,
        under torchrun, shared out between the ranks. Batches are prepared ahead in a thread; the
        resumable position is that of the last batch handed out, not of the last one prepared."""
        for batch, epoch, batch_in_epoch in prefetch(self._epochs(self.epoch, self.batch_in_epoch)):
            self.epoch, self.batch_in_epoch = epoch, batch_in_epoch
            yield to_device(batch, self.device)

    def batch_tokens(self, batch: dict) -> int:
        return batch["n_tokens"]

    def loss(self, model, batch: dict, label_smoothing: float = 0.0) -> torch.Tensor:
        return model(batch["src"], batch["tgt_in"], targets=batch["tgt_out"], label_smoothing=label_smoothing)

    @torch.no_grad()
    def evaluate(self, model, autocast) -> dict:
        """For each validation set: loss per target token (over the pairs training keeps) and greedy
        BLEU over every pair, decoded as `mt.evaluate --split valid --greedy` decodes it (a source too
        long for the model is truncated, never dropped), so the two agree. Keys: `val_loss`,
        `val_bleu` for the primary set, `val_loss_<name>`, `val_bleu_<name>` for the others."""
        from mt.decode_options import DecodeOptions
        from mt.inference.translator import Translator  # the one decoding path for every score

        translator = Translator(self.cfg, self.tokenizer, model, self.runtime)
        metrics = {}
        for v in self.valid_sets:
            hypotheses = translator.translate(
                v.sources,
                DecodeOptions(beam=1),
                batch_size=64 if self.device.type == "cpu" else 512,
                warn_truncated=False,
            )
            bleu = sacrebleu.corpus_bleu(hypotheses, [v.references])
            metrics |= {
                f"val_loss{v.label}": self._loss_over(model, autocast, v.pairs),
                f"val_bleu{v.label}": round(bleu.score, 2),
            }
        return metrics

    def _loss_over(self, model, autocast, corpus: EncodedCorpus) -> float:
        total, count = torch.zeros((), device=self.device), 0
        for rows in token_batches(corpus.src_lens, corpus.tgt_lens, self.max_tokens, seed=0):
            batch = to_device(collate(*corpus.ids(rows), *self.padding), self.device)
            with autocast:
                total += self.loss(model, batch) * batch["n_tokens"]
            count += batch["n_tokens"]
        return total.item() / count

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.batch_in_epoch = state["epoch"], state["batch_in_epoch"]

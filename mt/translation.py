"""The translation task: parallel corpora, token-budget batches, loss, validation loss and BLEU."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path

import datasets
import numpy as np
import sacrebleu
import sentencepiece as spm
import torch

from mt import catalog
from mt.batching import collate, shard, token_batches
from mt.checkpoint import atomic_write
from mt.config import Config
from mt.distributed import World
from mt.decode import greedy_or_sample
from mt.errors import UserError
from mt.model import token_loss
from mt.parallel_data import columns, encode_pairs, filter_pairs, load_corpora, load_pairs
from mt.tokenizer import CharTokenizer, SentencePieceTokenizer, Tokenizer, load_tokenizer


def train_tokenizer(cfg: Config, train: datasets.Dataset, cache_dir: Path) -> Tokenizer:
    """A tokenizer for the training corpora. SentencePiece models are cached by the corpora's
    content and the tokenizer settings, so a second run with the same data does not retrain."""
    src_text, tgt_text = columns(train, "src", "tgt")
    if cfg.tokenizer.kind == "char":
        return CharTokenizer.train(src_text + tgt_text)
    t = cfg.tokenizer
    key = hashlib.sha256(f"{train._fingerprint}|{t.vocab_size}|{t.model_type}".encode()).hexdigest()[:20]
    cached = cache_dir / f"spm-{key}.model"
    if cached.is_file():
        return SentencePieceTokenizer(cached.read_bytes())
    print(f"training a {t.vocab_size}-piece {t.model_type} SentencePiece model", file=sys.stderr)
    tokenizer = SentencePieceTokenizer.train(src_text + tgt_text, t.vocab_size, t.model_type)
    cache_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(cached, lambda tmp: Path(tmp).write_bytes(tokenizer.model_proto))
    return tokenizer


def to_device(batch: dict, device: torch.device) -> dict:
    pin = device.type == "cuda"
    return {k: (v.pin_memory().to(device, non_blocking=True) if pin else v.to(device)) if torch.is_tensor(v) else v
            for k, v in batch.items()}


class TranslationTask:
    """Batches, loss and evaluation for the encoder-decoder Transformer."""

    best_metric, higher_is_better = "val_bleu", True

    def __init__(self, cfg: Config, run_dir: Path, device: torch.device, reuse_tokenizer: bool, world: World = World()):
        d = cfg.data
        if cfg.data.max_tokens < d.max_len + 1:
            raise UserError(f"data.max_tokens ({d.max_tokens}) must hold at least one pair of data.max_len + 1 ({d.max_len + 1}) tokens")
        train = load_corpora(d.train, "train", d.src_lang, d.tgt_lang)
        valid = load_pairs(d.valid, "valid", d.src_lang, d.tgt_lang)
        cache, log = catalog.data_dir() / "cache", sys.stderr if world.is_main else None
        if reuse_tokenizer:
            self.tokenizer: Tokenizer = load_tokenizer(run_dir)
        else:
            self.tokenizer = train_tokenizer(cfg, train, cache)
            self.tokenizer.save(run_dir)
        self.world = world
        self.train = filter_pairs(encode_pairs(train, self.tokenizer, cache), d.max_len, d.max_len_ratio, "train", log)
        self.valid = filter_pairs(encode_pairs(valid, self.tokenizer, cache), d.max_len, d.max_len_ratio, "valid", log)
        self.src_ids, self.tgt_ids = columns(self.train, "src_ids", "tgt_ids")
        self.valid_src, self.valid_tgt, self.valid_refs = columns(self.valid, "src_ids", "tgt_ids", "tgt")
        self.src_lens = np.array([len(x) for x in self.src_ids])
        self.tgt_lens = np.array([len(x) for x in self.tgt_ids])
        self.max_tokens, self.seed, self.device = d.max_tokens, cfg.seed, device
        self.sample_alpha = cfg.tokenizer.sampling_alpha if isinstance(self.tokenizer, SentencePieceTokenizer) else 0.0
        if self.sample_alpha > 0:
            spm.set_random_generator_seed(cfg.seed)  # SentencePiece samples with its own generator
        self.epoch, self.batch_in_epoch = 0, 0

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def _batch(self, rows: np.ndarray) -> dict:
        if self.sample_alpha > 0:  # subword regularization: a fresh segmentation every time
            texts = self.train.select(rows)
            src = self.tokenizer.encode_batch(texts["src"][:], self.sample_alpha)
            tgt = self.tokenizer.encode_batch(texts["tgt"][:], self.sample_alpha)
            keep = [j for j, (s, t) in enumerate(zip(src, tgt)) if s and t]
            src, tgt = [src[j] for j in keep], [tgt[j] for j in keep]
        else:
            src, tgt = [self.src_ids[i] for i in rows], [self.tgt_ids[i] for i in rows]
        return to_device(collate(src, tgt), self.device)

    def train_batches(self) -> Iterator[dict]:
        """Endless epochs; each covers every pair once, in batches shuffled by (seed, epoch) and,
        under torchrun, shared out between the ranks."""
        while True:
            batches = token_batches(self.src_lens, self.tgt_lens, self.max_tokens, self.seed + self.epoch)
            batches = shard(batches, self.world.rank, self.world.size)
            while self.batch_in_epoch < len(batches):
                rows = batches[self.batch_in_epoch]
                self.batch_in_epoch += 1
                yield self._batch(rows)
            self.epoch, self.batch_in_epoch = self.epoch + 1, 0

    def batch_tokens(self, batch: dict) -> int:
        return batch["n_tokens"]

    def loss(self, model, batch: dict, label_smoothing: float = 0.0) -> torch.Tensor:
        logits = model(batch["src"], batch["tgt_in"])  # (B, T, V)
        return token_loss(logits, batch["tgt_out"], label_smoothing)

    @torch.no_grad()
    def evaluate(self, model, autocast) -> dict:
        """Validation loss per target token, and greedy BLEU against the raw references."""
        src_ids, tgt_ids = self.valid_src, self.valid_tgt
        src_lens, tgt_lens = np.array([len(x) for x in src_ids]), np.array([len(x) for x in tgt_ids])
        hypotheses = [""] * len(src_ids)
        total, count = torch.zeros((), device=self.device), 0
        for rows in token_batches(src_lens, tgt_lens, self.max_tokens, seed=0):
            batch = to_device(collate([src_ids[i] for i in rows], [tgt_ids[i] for i in rows]), self.device)
            with autocast:
                total += self.loss(model, batch) * batch["n_tokens"]
                outputs, _ = greedy_or_sample(model, batch["src"])
            count += batch["n_tokens"]
            for i, ids in zip(rows, outputs):
                hypotheses[i] = self.tokenizer.decode(ids)
        bleu = sacrebleu.corpus_bleu(hypotheses, [self.valid_refs])
        return {"val_loss": total.item() / count, "val_bleu": round(bleu.score, 2)}

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.batch_in_epoch = state["epoch"], state["batch_in_epoch"]

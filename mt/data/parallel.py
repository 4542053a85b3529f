"""A translation run's data, read once: the training corpora cleaned, mixed and encoded, the
validation sets, and the tokenizer (the run's own, another run's, or learned from the corpora).

`prepare_parallel` takes the recipe's `data` and `tokenizer` sections as they are; the training
task asks it once and keeps only batches, loss and evaluation for itself.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import datasets

from mt.data import catalog
from mt.data.cleaning import normalised
from mt.data.corpora import (
    Draw,
    EncodedCorpus,
    columns,
    corpus_weights,
    load_corpora,
    load_pairs,
    sample_texts,
    spec_label,
)
from mt.data.mixing import Mixture
from mt.data.tokenizer import Tokenizer, learn_tokenizer, load_tokenizer
from mt.errors import UserError


class ValidationSet(NamedTuple):
    label: str  # "" for the primary set, "_<name>" for the others
    pairs: EncodedCorpus  # the pairs within the length limits: validation loss
    sources: list[str]  # every pair: BLEU
    references: list[str]


class ParallelData(NamedTuple):
    tokenizer: Tokenizer
    train: EncodedCorpus
    mixture: Mixture | None  # with mixing weights: each epoch's draw from every corpus
    valid_sets: list[ValidationSet]  # the first is the primary one (best.pt follows it)


def train_tokenizer(
    settings, train: datasets.Dataset, seed: int, cache_dir: Path, weights=None, sizes: list[int] | None = None
) -> Tokenizer:
    """The tokenizer `settings` (the recipe's tokenizer section) describe for the training pairs:
    every character of them, or SentencePiece learned from a seeded sample of `max_pairs` pairs
    (cached by their content). With mixing `weights` (and `sizes`: each corpus' pairs), the sample
    takes each corpus' share of it."""
    if len(train) == 0:
        raise UserError(
            "data.train: the training corpora hold no pairs (empty files?); give at least one corpus with text"
        )
    return learn_tokenizer(
        settings,
        lambda n: sample_texts(train, n, seed, mix=(sizes, weights) if weights else None),
        len(train),
        train._fingerprint + (f"|weights {weights}" if weights else ""),
        seed,
        cache_dir,
        "data.train",
    )


def prepare_parallel(data, tokenizer_settings, seed: int, tokenizer_from: Path | None, log=sys.stderr) -> ParallelData:
    """Everything a translation run reads, for the recipe's `data` section. The tokenizer is loaded
    from the run directory `tokenizer_from`, else learned from the training corpora (with
    `tokenizer_settings`); `log` (None: silent) hears what cleaning and filtering dropped."""
    if data.max_tokens < data.max_len + 1:
        raise UserError(
            f"data.max_tokens ({data.max_tokens}) must hold at least one pair of data.max_len + 1 "
            f"({data.max_len + 1}) tokens"
        )
    cache = catalog.data_dir() / "cache"
    langs = data.src_lang, data.tgt_lang
    valid_specs = data.valid_sets
    held_out = frozenset()
    if data.held_out:  # off only where a toy task scores the very pairs it learns from
        held_out = held_out_sources(valid_specs, "valid", langs) | held_out_sources(data.test_sets, "test", langs)
    train, repeats, sizes = load_corpora(
        data.train, "train", *langs, data.clean, data.dedup, log, data.draw, seed, held_out
    )
    fixed = Draw(data.valid_pairs, (0,)) if data.valid_pairs else None  # the same pairs whatever the seed
    valid = [load_pairs(spec, "valid", *langs, fixed) for spec in valid_specs]
    weights = corpus_weights(data.train) if sizes else None
    if tokenizer_from is not None:
        tokenizer = load_tokenizer(tokenizer_from)
    else:
        tokenizer = train_tokenizer(tokenizer_settings, train, seed, cache, weights, sizes)
    encode = {
        "tokenizer": tokenizer,
        "cache_dir": cache,
        "max_len": data.max_len,
        "max_ratio": data.max_len_ratio,
        "num_proc": data.num_proc,
        "log": log,
    }
    encoded = EncodedCorpus(train, what="train", repeats=repeats, sizes=sizes, **encode)
    mixture = _mixture(data.train, encoded, weights, seed, log) if sizes else None
    labels = [""] + [f"_{spec_label(spec)}" for spec in valid_specs[1:]]
    valid_sets = [
        ValidationSet(label, EncodedCorpus(pairs, what=f"valid{label}", **encode), *columns(pairs, "src", "tgt"))
        for label, pairs in zip(labels, valid)
    ]
    return ParallelData(tokenizer, encoded, mixture, valid_sets)


def held_out_sources(specs: list, role: str, langs: tuple[str, str]) -> frozenset[str]:
    """Every source sentence of the `role` sets `specs` name, whole (not only the pairs a
    validation scores), normalised as training sources are compared with them."""
    return frozenset(normalised(s) for spec in specs for s in load_pairs(spec, role, *langs)["src"])


def _mixture(specs: list, train: EncodedCorpus, weights: list[float], seed: int, log) -> Mixture:
    mixture = Mixture(train.corpus_of, weights, seed)
    if log is not None:
        shares = ", ".join(
            f"{spec_label(spec)} {share:.0%} ({k:,})"
            for spec, share, k in zip(specs, mixture.shares(), mixture.per_epoch)
        )
        print(f"train: each epoch mixes {shares}", file=log)
    return mixture

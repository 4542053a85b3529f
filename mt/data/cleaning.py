"""Cleaning of training pairs, as recipe options (data.clean, data.dedup), each rule counted.

data.clean strips surrounding whitespace and drops pairs with no letter on a side (numbers,
punctuation, session headers made of symbols) and pairs whose source and target are the same text
(untranslated lines). data.dedup keeps the first of exactly repeated pairs (after stripping when
data.clean is on). Validation and test sets are never cleaned: they are scored as published; and
no training pair whose source is one of theirs is kept (`without_held_out`), whatever the recipe.
"""

from __future__ import annotations

import re
import sys
from collections import Counter

import datasets

from mt.errors import UserError

_LETTER = re.compile(r"[^\W\d_]")


def _cleaned(src: list[str], tgt: list[str], clean: bool, dedup: bool, counts: Counter):
    """The kept (source, target) pairs; `counts` gets each rule's drops."""
    seen: set[tuple[str, str]] = set()
    for s, t in zip(src, tgt):
        if clean:
            s_clean, t_clean = s.strip(), t.strip()
            counts["stripped"] += s_clean != s or t_clean != t
            s, t = s_clean, t_clean
            if not (_LETTER.search(s) and _LETTER.search(t)):
                counts["no letters"] += 1
                continue
            if s == t:
                counts["source = target"] += 1
                continue
        if dedup:
            if (s, t) in seen:
                counts["duplicates"] += 1
                continue
            seen.add((s, t))
        yield s, t


def clean_pairs(ds: datasets.Dataset, clean: bool, dedup: bool, what: str, log=sys.stderr) -> datasets.Dataset:
    """`ds` (columns src, tgt) with the chosen rules applied, and a line saying what each did."""
    if not (clean or dedup):
        return ds
    table = ds.select_columns(["src", "tgt"]).to_dict()
    counts: Counter = Counter()
    kept = list(_cleaned(table["src"], table["tgt"], clean, dedup, counts))
    if log is not None:
        reasons = ("stripped", "no letters", "source = target", "duplicates")
        detail = ", ".join(f"{counts[why]:,} {why}" for why in reasons if counts[why]) or "nothing to clean"
        print(f"{what}: cleaning {len(ds):,} pairs kept {len(kept):,} ({detail})", file=log)
    if not kept:
        raise UserError(f"{what}: no pair is left after cleaning (data.clean, data.dedup)")
    src, tgt = zip(*kept)
    return datasets.Dataset.from_dict({"src": list(src), "tgt": list(tgt)}, features=ds.features)


def normalised(text: str) -> str:
    """A sentence as held-out sets are compared: whitespace collapsed, case folded."""
    return " ".join(text.split()).casefold()


def without_held_out(ds: datasets.Dataset, held_out: frozenset[str], what: str, log=sys.stderr) -> datasets.Dataset:
    """`ds` without the pairs whose source (`normalised`) is in `held_out`, the validation and test
    sets' sources: a training pair that is a test sentence would score the model on what it has
    seen. Says how many were dropped."""
    if not held_out:
        return ds
    keep = [i for i, s in enumerate(ds["src"]) if normalised(s) not in held_out]
    if len(keep) == len(ds):
        return ds
    if log is not None:
        print(f"{what}: {len(ds) - len(keep):,} pairs dropped, their source in a validation or test set", file=log)
    if not keep:
        raise UserError(f"{what}: every pair's source is in a validation or test set")
    return ds.select(keep)

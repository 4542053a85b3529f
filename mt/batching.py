"""Token-budget batches from length-sorted buckets, and their collation into padded tensors."""

from __future__ import annotations

import numpy as np
import torch

from mt.tokenizer import END, PAD, START


def token_batches(src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, seed: int) -> list[np.ndarray]:
    """Split pair indices into batches whose padded size, sentences x (longest side + 1), stays
    within `max_tokens`. Pairs are sorted by length (ties broken at random), so padding stays
    small; the batch order is shuffled. Every pair is in exactly one batch. Same seed, same batches."""
    rng = np.random.default_rng(seed)
    longest = np.maximum(src_lens, tgt_lens) + 1  # + <END> (source, target output) or <START> (target input)
    order = np.lexsort((rng.random(len(longest)), longest))
    batches, start, width = [], 0, 0
    for i, idx in enumerate(order):
        width = max(width, int(longest[idx]))
        if (i - start + 1) * width > max_tokens and i > start:
            batches.append(order[start:i])
            start, width = i, int(longest[idx])
    batches.append(order[start:])
    rng.shuffle(batches)
    return batches


def pad(rows: list[list[int]], prefix: list[int], suffix: list[int]) -> torch.Tensor:
    """(B, longest) tensor of prefix + row + suffix, right-padded with <pad>."""
    width = max(len(r) for r in rows) + len(prefix) + len(suffix)
    out = torch.full((len(rows), width), PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        seq = prefix + r + suffix
        out[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    return out


def collate(src_rows: list[list[int]], tgt_rows: list[list[int]]) -> dict:
    """src = x + <END>; tgt_in = <START> + y; tgt_out = y + <END>; `n_tokens` counts target tokens."""
    return {
        "src": pad(src_rows, [], [END]),
        "tgt_in": pad(tgt_rows, [START], []),
        "tgt_out": pad(tgt_rows, [], [END]),
        "n_tokens": sum(len(t) + 1 for t in tgt_rows),
    }


def shard(batches: list[np.ndarray], rank: int, size: int) -> list[np.ndarray]:
    """This rank's share of an epoch's batches, the same count on every rank. The largest batches
    are split in two until the count divides evenly, so each pair is still seen once per epoch
    (only an epoch of single-pair batches is topped up by repeating its first batches)."""
    batches = list(batches)
    while len(batches) % size:
        i = max(range(len(batches)), key=lambda j: len(batches[j]))
        if len(batches[i]) < 2:
            batches += batches[: size - len(batches) % size]
            break
        big = batches.pop(i)
        batches[i:i] = [big[: len(big) // 2], big[len(big) // 2 :]]
    return batches[rank::size]

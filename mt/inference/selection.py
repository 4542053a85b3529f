"""The largest entries of each row of a (B, V) score matrix, faster than `argmax` and `topk` on CPU.

PyTorch's CPU argmax and topk walk a row one element at a time, while the vectorised `amax` is many
times faster. So each row is cut into blocks: `argmax` runs over the blocks' maxima and then inside
the winning block (the same index as `argmax`, the first of equal maxima), and a row's k largest
entries lie in the k blocks with the largest maxima, so `topk` looks only at those. Entries after
the last whole block are compared on their own, whatever the vocabulary's size.
"""

from __future__ import annotations

import functools
import math

import torch

# topk_rows' block size, and the unit of argmax_rows' block sizes: whole vectors, where `amax` is fastest
BLOCK = 64


@functools.cache
def _argmax_block(vocab: int) -> int:
    """Entries per block: a multiple of BLOCK near the square root of `vocab`, so that
    neither the blocks nor their count is large."""
    return BLOCK * max(1, round(math.sqrt(vocab) / BLOCK))


def argmax_rows(scores: torch.Tensor) -> torch.Tensor:
    """(B, V) -> (B,) the index of each row's maximum, equal to `scores.argmax(dim=-1)`. The entries
    after the last whole block win only with a larger maximum (or a NaN where the blocks hold none):
    among equals the first index wins, as in `argmax`."""
    rows, vocab = scores.shape
    size = _argmax_block(vocab)
    blocks = vocab // size
    if scores.device.type != "cpu" or not scores.is_contiguous() or blocks < 2:
        return scores.argmax(dim=-1)
    body = scores[:, : blocks * size].view(rows, blocks, size)
    maxima = body.amax(dim=-1)  # (B, blocks)
    block = maxima.argmax(dim=-1)  # (B,) the first block holding the maximum of the whole blocks
    row = torch.arange(rows, device=scores.device)
    index = block * size + body[row, block].argmax(dim=-1)
    if vocab == blocks * size:
        return index
    tail_max, tail_index = scores[:, blocks * size :].max(dim=-1)
    best = maxima[row, block]
    tail_wins = (tail_max > best) | (tail_max.isnan() & ~best.isnan())  # argmax takes NaN as the largest
    return torch.where(tail_wins, blocks * size + tail_index, index)


def topk_rows(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, V) -> (B, k) values and indices of each row's k largest entries, largest first: the
    values of `scores.topk(k, dim=-1)`, and the same indices where values differ (`topk` orders
    equal values in no documented way). Entries past the last whole block are candidates too."""
    rows, vocab = scores.shape
    blocks = vocab // BLOCK
    if scores.device.type != "cpu" or not scores.is_contiguous() or blocks < 4 * k:
        return scores.topk(k, dim=-1)
    body = scores[:, : blocks * BLOCK].view(rows, blocks, BLOCK)
    best = body.amax(dim=-1).topk(k, dim=-1).indices  # (B, k) the blocks that hold the k largest
    candidates = body[torch.arange(rows, device=scores.device)[:, None], best].view(rows, -1)
    in_blocks = candidates.size(1)
    if vocab > blocks * BLOCK:
        candidates = torch.cat([candidates, scores[:, blocks * BLOCK :]], dim=1)
    values, pick = candidates.topk(k, dim=-1)
    block = best.gather(1, (pick // BLOCK).clamp(max=k - 1))
    in_tail = pick - in_blocks + blocks * BLOCK
    index = torch.where(pick < in_blocks, block * BLOCK + pick % BLOCK, in_tail)
    return values, index

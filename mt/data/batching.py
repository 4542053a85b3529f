"""Token-budget batches from length-sorted buckets, and their collation into padded tensors."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from queue import Full, Queue
from threading import Event, Thread
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from mt.data.vocab import END, PAD, START


class Ragged(NamedTuple):
    """Sequences of token ids as one flat array and the length of each."""

    values: np.ndarray
    lengths: np.ndarray

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int]]) -> Ragged:
        lengths = np.array([len(r) for r in rows], dtype=np.int64)
        values = np.fromiter((t for r in rows for t in r), dtype=np.int64, count=int(lengths.sum()))
        return cls(values, lengths)

    @classmethod
    def from_arrow(cls, column: pa.ChunkedArray | pa.ListArray) -> Ragged:
        return cls(pc.list_flatten(column).to_numpy(), pc.list_value_length(column).to_numpy())


def token_batches(src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, seed: int) -> list[np.ndarray]:
    """Split pair indices into batches whose padded size, sentences x (longest side + 1), stays
    within `max_tokens`. Pairs are sorted by length (ties broken at random), so padding stays
    small; the batch order is shuffled. Every pair is in exactly one batch. Same seed, same batches.

    Works on lengths alone, one Python step per distinct length, so tens of millions of pairs
    take seconds: within a run of equal widths w a batch holds max_tokens // w pairs, and a batch
    carried over from shorter pairs is closed as soon as the next pair would not fit."""
    rng = np.random.default_rng(seed)
    longest = (
        np.maximum(src_lens, tgt_lens).astype(np.int64) + 1
    )  # + <END> (source, target output) or <START> (target input)
    # Sort by length, ties in random order, as np.lexsort((random, longest)) would, but twice as
    # fast on 40M pairs: shuffle by the random keys, then a stable radix sort on 16-bit lengths.
    order = np.argsort(rng.random(len(longest)))
    small = np.int16 if longest.max(initial=0) < 2**15 else np.int32
    order = order[np.argsort(longest[order].astype(small), kind="stable")]
    sorted_widths = longest[order]
    starts = np.concatenate([[0], np.flatnonzero(np.diff(sorted_widths)) + 1])
    widths, ends = sorted_widths[starts], np.append(starts[1:], len(order))
    cuts, open_start = [], 0  # cut positions in `order`; the open batch begins at open_start
    for width, start, end in zip(widths.tolist(), starts.tolist(), ends.tolist()):
        cap = max(1, max_tokens // width)
        if start - open_start + 1 > cap and start > open_start:  # the next pair does not fit: close
            cuts.append(start)
            open_start = start
        first_full = open_start + cap  # the open batch fills up here, then full batches of `cap`
        new_cuts = list(range(first_full, end, cap))
        cuts += new_cuts
        if new_cuts:
            open_start = new_cuts[-1]
    batches = np.split(order, cuts)
    rng.shuffle(batches)
    return batches


def pad(
    rows: Ragged, prefix: int | None = None, suffix: int | None = None, multiple: int = 1, limit: int | None = None
) -> torch.Tensor:
    """(B, width) tensor of [prefix] + row + [suffix], right-padded with <pad>; the width is
    rounded up to `multiple` (tensor cores and torch.compile like few, aligned shapes) but not
    past `limit` (the model's positions)."""
    values, lengths = rows
    start = int(prefix is not None)
    width = int(lengths.max()) + start + int(suffix is not None)
    width = max(width, min(-(-width // multiple) * multiple, limit or width))
    out = np.full((len(lengths), width), PAD, dtype=np.int64)
    columns = np.arange(width)
    out[(columns >= start) & (columns < start + lengths[:, None])] = values  # row-major, as values are laid out
    if prefix is not None:
        out[:, 0] = prefix
    if suffix is not None:
        out[np.arange(len(lengths)), start + lengths] = suffix
    return torch.from_numpy(out)


def collate(src_rows, tgt_rows, multiple: int = 1, limit: int | None = None) -> dict:
    """src = x + <END>; tgt_in = <START> + y; tgt_out = y + <END>; `n_tokens` counts target tokens.
    Rows are lists of ids or `Ragged`; widths are padded as `pad` says."""
    src = src_rows if isinstance(src_rows, Ragged) else Ragged.from_rows(src_rows)
    tgt = tgt_rows if isinstance(tgt_rows, Ragged) else Ragged.from_rows(tgt_rows)
    return {
        "src": pad(src, suffix=END, multiple=multiple, limit=limit),
        "tgt_in": pad(tgt, prefix=START, multiple=multiple, limit=limit),
        "tgt_out": pad(tgt, suffix=END, multiple=multiple, limit=limit),
        "n_tokens": int(tgt.lengths.sum()) + len(tgt.lengths),
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


def prefetch(items: Iterator, depth: int = 2) -> Iterator:
    """Yield from `items`, produced `depth` ahead in a background thread, so the next batch is
    read and collated while the current step runs (pyarrow and numpy release the GIL). Closing
    the returned generator stops the thread and waits for it: a thread still inside torch or
    arrow code when the interpreter exits can abort the process."""
    queue: Queue = Queue(maxsize=depth)
    stop, done = Event(), object()

    def put(entry) -> bool:
        while not stop.is_set():
            try:
                queue.put(entry, timeout=0.1)
                return True
            except Full:
                pass
        return False

    def produce():
        try:
            for item in items:
                if not put((item, None)):
                    return
        except BaseException as e:  # handed to the consumer, which raises it
            put((done, e))
        else:
            put((done, None))

    worker = Thread(target=produce, daemon=True, name="mt-prefetch")
    worker.start()
    try:
        while True:
            item, error = queue.get()
            if item is done:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
        worker.join(timeout=60)  # it finishes the item in hand, then sees `stop`

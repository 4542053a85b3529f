"""Decode several batches at once on a multi-core CPU: one batch per core, each on one thread.

A decoding step is hundreds of small operations, which two threads split badly; two batches
decoded side by side, each on a core of its own, keep both cores busy with whole operations, as
CTranslate2's `inter_threads` and Marian's CPU workers do (docs/cpu.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed

import torch


def default_workers(device: torch.device, batches: int) -> int:
    """As many workers as intra-op threads (one each), on a CPU with more than one batch to do."""
    if device.type != "cpu":
        return 1
    return max(1, min(torch.get_num_threads(), batches))


def map_batches(decode: Callable, batches: Sequence, workers: int, cost: Callable | None = None) -> list:
    """[decode(b) for b in batches], in order; with workers > 1 on that many threads, which share
    the intra-op threads out between them. A batch is decoded whole by one worker, so its outputs
    are those of decoding it alone with that worker's number of threads. Given each batch's `cost`,
    the costliest start first: the last to start is then a cheap one, and the workers finish
    together instead of one of them decoding the longest batch alone at the end."""
    if workers <= 1 or len(batches) <= 1:
        return [decode(batch) for batch in batches]
    order = sorted(range(len(batches)), key=lambda i: -cost(batches[i])) if cost else range(len(batches))
    threads = torch.get_num_threads()
    pool = ThreadPoolExecutor(
        workers,
        thread_name_prefix="mt-decode",
        initializer=torch.set_num_threads,
        initargs=(max(1, threads // workers),),
    )
    try:
        futures = {i: pool.submit(decode, batches[i]) for i in order}
        for done in as_completed(futures.values()):
            done.result()  # an error stops the rest at once, whichever batch it came from
        return [futures[i].result() for i in range(len(batches))]
    finally:  # on an error or Ctrl-C, drop the batches not yet started instead of decoding them all
        pool.shutdown(wait=True, cancel_futures=True)
        torch.set_num_threads(threads)  # the setting is partly process-wide (MKL, new threads): put it back

"""Decode several batches at once on a multi-core CPU: one batch per core, each on one thread.

A decoding step is hundreds of small operations, and splitting each of them over two cores gains
little: int8 beam 5 over test_2016 took 16.5-17.9 s on one thread and 12.6-14.6 s on two. Two
batches decoded side by side, each on a core of its own, keep both cores busy with whole operations
instead (another pair of runs, alternated in one process: 8.8-11.5 s against 10.9-11.8 s for one
batch at a time on two threads). CTranslate2 (inter_threads) and Marian (one worker per CPU thread) decode
on CPUs this way too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch


def default_workers(device: torch.device, batches: int) -> int:
    """As many workers as intra-op threads (one each), on a CPU with more than one batch to do."""
    if device.type != "cpu":
        return 1
    return max(1, min(torch.get_num_threads(), batches))


def map_batches(decode: Callable, batches: Sequence, workers: int) -> list:
    """[decode(b) for b in batches], in order; with workers > 1 on that many threads, which share
    the intra-op threads out between them. A batch is decoded whole by one worker, so its outputs
    are those of decoding it alone with that worker's number of threads."""
    if workers <= 1 or len(batches) <= 1:
        return [decode(batch) for batch in batches]
    threads = torch.get_num_threads()
    pool = ThreadPoolExecutor(
        workers,
        thread_name_prefix="mt-decode",
        initializer=torch.set_num_threads,
        initargs=(max(1, threads // workers),),
    )
    try:
        return list(pool.map(decode, batches))
    finally:  # on an error or Ctrl-C, drop the batches not yet started instead of decoding them all
        pool.shutdown(wait=True, cancel_futures=True)
        torch.set_num_threads(threads)  # the setting is partly process-wide (MKL, new threads): put it back

"""A step's micro-batches side by side on a multi-core CPU, each on a thread of its own.

A CPU training step is thousands of small operators that split badly over two cores, and the
Python issuing them keeps one core waiting; two micro-batches at once, one per core, keep both
busy, for a second micro-batch's activations in memory (docs/cpu.md). Each worker returns the
gradient of its share's weighted losses (`torch.autograd.grad`, so no worker writes `.grad` while
another runs); the shares are added in worker order, and each worker draws dropout from its own
generator seeded by the step, so a run repeats, and resumes, exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait

import torch

from mt.cpu.dropout import own_generator
from mt.errors import UserError


def resolve_workers(setting: int, device: torch.device, world_size: int, grad_accum: int, compiled: bool) -> int:
    """How many micro-batches run at once: `train.micro_batch_workers`, where 0 means one per
    intra-op thread on a CPU (at most `grad_accum`) and one elsewhere."""
    alone = device.type == "cpu" and world_size == 1 and not compiled
    if setting == 0:
        return max(1, min(torch.get_num_threads(), grad_accum)) if alone else 1
    if setting > 1 and not alone:
        raise UserError(
            "train.micro_batch_workers > 1 is for CPU training in one process without train.compile; "
            "set it to 0 (automatic) or 1"
        )
    return min(setting, grad_accum)


def shares(count: int, workers: int) -> list[range]:
    """Micro-batch indices 0..count-1 cut into `workers` contiguous shares, the larger ones first."""
    size, extra = divmod(count, workers)
    bounds = [0]
    for w in range(workers):
        bounds.append(bounds[-1] + size + (w < extra))
    return [range(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def worker_seed(step_seed: int, worker: int) -> int:
    return (step_seed * 1_000_037 + worker) % 2**63


class MicroBatchWorkers:
    """A pool of `workers` threads, each running its share of a step's micro-batches on
    `threads // workers` intra-op threads. Threads start at the first step and stop at `close`."""

    def __init__(self, workers: int):
        self.workers, self.threads = workers, torch.get_num_threads()
        self._pool: ThreadPoolExecutor | None = None

    def run(self, work: Callable[[range], tuple], count: int, step_seed: int) -> list[tuple]:
        """[work(share) for each share of `count` micro-batches], computed side by side, in order."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="mt-micro-batch")
        futures = [
            self._pool.submit(self._work, work, share, worker_seed(step_seed, i))
            for i, share in enumerate(shares(count, self.workers))
        ]
        wait(futures)  # every share ends before any error is raised: none is left running
        torch.set_num_threads(self.threads)  # partly process-wide (MKL): put the main thread's back
        return [f.result() for f in futures]

    def _work(self, work: Callable[[range], tuple], share: range, seed: int) -> tuple:
        # Set on every call, not once per thread: the main thread sets the process-wide part back.
        torch.set_num_threads(max(1, self.threads // self.workers))
        with own_generator(seed):
            return work(share)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def add_in_order(gradients: Sequence[Sequence[torch.Tensor | None]]) -> list[torch.Tensor | None]:
    """Per parameter, the workers' gradients added in worker order (None where none has one)."""
    total = []
    for parts in zip(*gradients):
        present = [g for g in parts if g is not None]
        if not present:
            total.append(None)
            continue
        first = present[0]
        for g in present[1:]:
            first = first.add_(g)
        total.append(first)
    return total

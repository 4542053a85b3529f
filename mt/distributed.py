"""Multi-process training under torchrun with PyTorch's DistributedDataParallel.

`torchrun --nproc_per_node=N -m mt.train RECIPE` sets WORLD_SIZE, RANK and LOCAL_RANK; a plain
`python -m mt.train` is a world of one and touches none of this. NCCL on GPUs, gloo on CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as td


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init(device: torch.device) -> tuple[World, torch.device]:
    """Join the process group torchrun describes; each process takes its own GPU."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        return World(), device
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    if device.type == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    td.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return World(rank, size), device


def barrier(world: World) -> None:
    if world.size > 1:
        td.barrier()


def _reduce(world: World, value: float, device: torch.device, op) -> float:
    if world.size == 1:
        return value
    t = torch.tensor(float(value), device=device)
    td.all_reduce(t, op=op)
    return t.item()


def any_rank(world: World, flag: bool, device: torch.device) -> bool:
    """True on every rank when it is True on any, so that all ranks stop at the same step."""
    return bool(_reduce(world, flag, device, td.ReduceOp.MAX))


def total(world: World, value: int, device: torch.device) -> int:
    """The sum of `value` over all ranks."""
    return int(_reduce(world, value, device, td.ReduceOp.SUM))


def shutdown(world: World) -> None:
    if world.size > 1 and td.is_initialized():
        td.destroy_process_group()

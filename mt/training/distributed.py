"""Multi-process training under torchrun with PyTorch's DistributedDataParallel.

`torchrun --nproc_per_node=N -m mt.train RECIPE` sets WORLD_SIZE, RANK and LOCAL_RANK; a plain
`python -m mt.train` is a world of one and touches none of this. NCCL on GPUs, gloo on CPU.

Ending cleanly takes care here. PyTorch keeps a gloo group that served a DistributedDataParallel
module alive after `destroy_process_group`, and its threads freeing a tensor while the interpreter
shuts down abort the process after training has finished (`bench/clean_exits.py --threads` shows
them). So every reduction goes through one long-lived tensor, ranks meet at a barrier before the
group is destroyed, and a torchrun worker ends through `run_worker`, skipping that teardown.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, TypeVar

import torch
import torch.distributed as td

from mt.errors import UserError

T = TypeVar("T")


@dataclass(frozen=True)
class World:
    """This process's place among the ranks, and the device its collectives run on."""

    rank: int = 0
    size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def placement() -> tuple[int, int]:
    """(this process's rank on its machine, the number of processes) torchrun gave; (0, 1) alone."""
    return int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def launched_rank() -> int:
    """This process's rank among all of torchrun's (0 alone): rank 0 writes the run directory."""
    return int(os.environ.get("RANK", "0"))


def init(device: torch.device) -> World:
    """Join the process group torchrun describes, on `device` (each process's own GPU)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        return World(device=device)
    td.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return World(int(os.environ["RANK"]), size, device)


_buffers: dict[torch.device, torch.Tensor] = {}


def _reduce(world: World, value: float, op) -> float:
    if world.size == 1:
        return value
    zero = torch.zeros((), dtype=torch.float64, device=world.device)
    buffer = _buffers.setdefault(world.device, zero)  # one long-lived tensor: see the module notes
    buffer.fill_(float(value))
    td.all_reduce(buffer, op=op)
    return buffer.item()


def any_rank(world: World, flag: bool) -> bool:
    """True on every rank when it is True on any, so that all ranks stop at the same step."""
    return bool(_reduce(world, flag, td.ReduceOp.MAX))


def from_main(world: World, value: float) -> float:
    """Rank 0's `value`, on every rank."""
    return _reduce(world, value if world.is_main else 0, td.ReduceOp.SUM)


def total(world: World, value: int) -> int:
    """The sum of `value` over all ranks."""
    return int(_reduce(world, value, td.ReduceOp.SUM))


def main_first(world: World, work: Callable[[], T], then_the_others: bool = False) -> T | None:
    """Run `work` on rank 0 (taking the run lock, training the tokenizer) and tell every rank
    whether it failed: a user error there then ends all ranks with its message, instead of leaving
    the others waiting for a rank that has gone. `then_the_others`: the other ranks run `work`
    after rank 0's has succeeded (reading what it wrote); else they get None."""
    result, error = None, None
    if world.is_main:
        try:
            result = work()
        except UserError as e:
            error = e
    if any_rank(world, error is not None):
        raise error or UserError("stopped: rank 0 could not prepare the run (its error is above)")
    return work() if then_the_others and not world.is_main else result


def shutdown(world: World, wait_for_all: bool) -> None:
    """Destroy the process group (again: a no-op). `wait_for_all` meets the other ranks first, on
    the normal way out; on an error path a rank may never arrive, so none is waited for."""
    if world.size == 1 or not td.is_initialized():
        return
    if wait_for_all:
        td.barrier()
    td.destroy_process_group()


def launched() -> bool:
    """Whether torchrun started this process as one of several."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def launch_id() -> str:
    """This launch as every rank of it on this machine sees it: the launcher's process id with the
    time it started since this boot, and the attempt (a process id alone repeats: a launcher that
    is PID 1 in a container has the same one every time). Outside Linux, the process id alone."""
    parent = os.getppid()
    try:
        started = Path(f"/proc/{parent}/stat").read_text().rsplit(")", 1)[1].split()[19]  # field 22: starttime
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except (OSError, IndexError):
        started = boot = "-"
    return f"{boot}:{parent}:{started}:{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def one_machine(what: str) -> None:
    """Refuse a launch over several machines for `what`, which ranks share through local files."""
    world, local = (
        int(os.environ.get("WORLD_SIZE", "1")),
        int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1"))),
    )
    if world > local:
        raise UserError(
            f"{what} shares its work between ranks through the run directory, on one machine: this launch "
            f"has {world} ranks, {local} here; launch it on one machine (torchrun --nnodes=1)"
        )


def run_worker(main: Callable[[], object]) -> NoReturn:
    """Run a torchrun worker's `main` and end the process with its exit code once everything it
    opened is closed: output flushed, then out without the interpreter's teardown (see the module
    notes)."""
    code = 0
    try:
        main()
    except SystemExit as e:
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

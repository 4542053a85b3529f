"""Do two-process torchrun trainings end cleanly? Runs plain two-process trainings and
kill-and-resume cycles (SIGKILL to every process at a random moment, then --resume to the end) in
turn, and counts the runs that end with a non-zero exit code or print "terminate called" (the
C++ runtime's abort).

    python bench/clean_exits.py --runs 50        # the long check: 25 plain runs, 25 kill-and-resume cycles
    python bench/clean_exits.py --threads        # which gloo threads outlive destroy_process_group

Tiny models on synthetic text in a temporary folder, gloo on the CPU. Exits 1 if any run failed.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kill_resume import REPO, kill_tree, output, start, task_args  # noqa: E402

THREADS_PROBE = """
import gc, os, torch, torch.distributed as td
def gloo_threads():
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    return sorted(n for n in names if "gloo" in n)
td.init_process_group("gloo")
print("rank", os.environ["RANK"], "with the group:", gloo_threads(), flush=True)
ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
del ddp
gc.collect()
td.destroy_process_group()
gc.collect()
print("rank", os.environ["RANK"], "after a DDP module and destroy_process_group:", gloo_threads(), flush=True)
"""


def one_run(args: list[str], out: Path, env: dict, rng: random.Random, kill_after: float | None) -> tuple[bool, str]:
    """A plain run, or (kill_after set) a run killed after a random share of it and resumed to the
    end. Returns whether the last process ended cleanly, and what it printed to stderr."""
    if kill_after is not None:
        proc = start(args, out, env, processes=2)
        try:
            proc.wait(timeout=rng.uniform(0.2, 0.9) * kill_after)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            proc.wait()
    proc = start(args, out, env, processes=2)
    proc.wait()
    stderr = output(proc)
    return proc.returncode == 0 and "terminate called" not in stderr, stderr


def stress(runs: int, seed: int) -> int:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    rng, failures, longest = random.Random(seed), 0, 10.0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env["MT_DATA_DIR"] = str(folder / "data")
        args = [a if not a.startswith("train.max_steps=") else "train.max_steps=30" for a in task_args("lm", folder)]
        for i in range(runs):
            kill = i % 2 == 1
            began = time.monotonic()
            ok, stderr = one_run(args, folder / f"run{i}", env, rng, longest if kill else None)
            if not kill:
                longest = time.monotonic() - began
            failures += not ok
            what = "kill-and-resume" if kill else "plain run"
            print(f"{i + 1:3d} {what:16s} {'clean' if ok else 'FAILED'}", flush=True)
            if not ok:
                print(stderr[-1500:], flush=True)
    print(f"{runs - failures} of {runs} two-process runs ended cleanly (exit code 0, no 'terminate called')")
    return 1 if failures else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=50, help="plain runs and kill-and-resume cycles, in turn")
    p.add_argument("--seed", type=int, default=0, help="where the kills land")
    p.add_argument("--threads", action="store_true", help="show the gloo threads left after destroy_process_group")
    args = p.parse_args(argv)
    if args.threads:
        with tempfile.NamedTemporaryFile("w", suffix=".py") as probe:
            probe.write(THREADS_PROBE)
            probe.flush()
            return subprocess.run(
                [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", probe.name],
                cwd=REPO,
                env={**os.environ, "OMP_NUM_THREADS": "1"},
            ).returncode
    return stress(args.runs, args.seed)


if __name__ == "__main__":
    sys.exit(main())

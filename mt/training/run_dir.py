"""The run directory as training keeps it: opening it (fresh or to resume, with the checks that
make a resume safe), the lock that keeps two trainings out of it, the metrics a killed run logged
past its checkpoint, and `RunState`, what `last.pt` restores besides the weights."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mt.checkpoint import LAST, load_checkpoint
from mt.config import Config, save_config
from mt.errors import UserError
from mt.files import atomic_write
from mt.training import distributed
from mt.training.plan import Plan

# Recipe sections that must not change when a run is resumed (train.* and decode.* may), and
# the keys in them that may: they change how fast the data is prepared, not what it is.
FROZEN_ON_RESUME = ("data", "tokenizer", "model", "distill")
FREE_ON_RESUME = {"data.num_proc", "distill.processes"}


def check_resumable(cfg: Config, saved: dict, run_dir: Path) -> None:
    now = cfg.to_dict()
    if saved.get("seed", cfg.seed) != cfg.seed:  # it orders the epochs: a new seed would reshuffle mid-epoch
        raise UserError(
            f"cannot resume {run_dir}: seed was {saved['seed']}, the recipe now says {cfg.seed}; "
            "restore it or train into another out_dir"
        )
    for section in FROZEN_ON_RESUME:
        before = saved.get(section) or {}  # runs saved before a section existed lack it
        for key, value in now[section].items():
            if before.get(key, value) != value and f"{section}.{key}" not in FREE_ON_RESUME:
                raise UserError(
                    f"cannot resume {run_dir}: {section}.{key} was {before.get(key)!r}, the recipe now says "
                    f"{value!r}; restore it or train into another out_dir"
                )


def trim_metrics(path: Path, step: int) -> None:
    """Keep the metrics of evaluations up to `step`: a run killed after logging an evaluation but
    before its checkpoint evaluates that step again when resumed, and logs it again."""
    if not path.is_file():
        return
    rows = [line for line in path.read_text().splitlines() if line.strip()]
    kept = []
    for line in rows:
        try:
            if json.loads(line)["step"] <= step:
                kept.append(line)
        except (ValueError, KeyError):
            pass  # a line cut short by the kill
    if len(kept) != len(rows):
        atomic_write(path, lambda tmp: Path(tmp).write_text("".join(line + "\n" for line in kept)))


@dataclass
class RunState:
    """Where a run has got to: saved in last.pt, restored by --resume."""

    step: int = 0
    elapsed_s: float = 0.0  # training time spent before this process took over
    best: float | None = None  # the best validation score so far
    bad_evals: int = 0  # evaluations since it last improved
    plan: Plan | None = None  # what a time budget became (mt/training/plan.py)

    def record(self, score: float, higher_is_better: bool) -> bool:
        """Count an evaluation's score; returns whether it improved on the best (then it is the best)."""
        improved = self.best is None or (score > self.best if higher_is_better else score < self.best)
        if improved:
            self.best, self.bad_evals = score, 0
        else:
            self.bad_evals += 1
        return improved


def check_start(cfg: Config, resume: bool) -> None:
    """Whether the run directory fits `--resume`: a new run must find no run there, a resumed one its
    last.pt. Asked before any work that precedes training (a teacher's translation), and again by it."""
    last_path = cfg.run_dir / LAST
    if resume and not last_path.is_file():
        raise UserError(f"--resume: {last_path} does not exist; start the run without --resume")
    if not resume and last_path.is_file():
        raise UserError(
            f"{cfg.run_dir} already holds a run; continue it with --resume, or set out_dir=... (or delete it)"
        )


def open_run(cfg: Config, resume: bool, world: distributed.World) -> dict | None:
    """Check the run directory against `--resume`; return the checkpoint to resume from, if any."""
    run_dir, last_path = cfg.run_dir, cfg.run_dir / LAST
    check_start(cfg, resume)
    ckpt = load_checkpoint(last_path) if resume else None
    if ckpt:
        check_resumable(cfg, ckpt["config"], run_dir)
    if world.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir / "config.yaml")
        trim_metrics(run_dir / "metrics.jsonl", ckpt["step"] if ckpt else 0)  # what a killed run logged past it
    return ckpt


class RunLock:
    """An exclusive lock on a run directory, so two trainings never write into the same one. The
    operating system drops it when its process ends, so a killed run leaves no stale lock."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / ".lock"
        self.file = None

    def acquire(self) -> RunLock:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "a")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.release()
            raise UserError(
                f"another training is writing to {self.path.parent} right now; wait for it or set out_dir=..."
            ) from None
        return self

    def release(self) -> None:
        if self.file is not None:
            self.file.close()  # closing releases the lock
            self.file = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()

"""When training stops, decided in one place: the step limit, the time budget, patience, or Ctrl-C.

Under torchrun every rank must stop at the same step, so the decisions that depend on one rank's
clock or signal are compared across ranks, and only at steps where a sync happens anyway.
"""

from __future__ import annotations

import signal

import torch

from mt import distributed
from mt.config import TrainConfig


class StopFlag:
    """The first Ctrl-C asks the loop to stop after the current step; a second one aborts."""

    def __init__(self):
        self.requested = False

    def __enter__(self):
        self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self.previous)


def expected_last_step(step: int, first_step: int, seconds: float, seconds_left: float, max_steps: int) -> int:
    """The step training will stop at: max_steps, or sooner where the time budget runs out first at
    the pace so far (evaluations included), so the progress bar's total and ETA tell the truth."""
    if seconds_left == float("inf") or step <= first_step or seconds <= 0:
        return max_steps
    pace = seconds / (step - first_step)
    return max(step, min(max_steps, step + int(max(seconds_left, 0.0) / pace)))


class StopPolicy:
    """Reads the recipe's stopping rules; `after_step` and `after_evaluation` say whether and why to stop."""

    def __init__(self, tc: TrainConfig, world: distributed.World, device: torch.device, flag: StopFlag):
        self.tc, self.world, self.device, self.flag = tc, world, device, flag
        self.budget_s = tc.max_minutes * 60 if tc.max_minutes else float("inf")

    def fraction_spent(self, elapsed_s: float) -> float:
        """How much of the time budget is gone (0 without one): the schedule anneals by it."""
        return elapsed_s / self.budget_s

    def seconds_left(self, elapsed_s: float) -> float:
        return self.budget_s - elapsed_s

    def after_step(self, step: int, elapsed_s: float) -> str | None:
        """'interrupted' (Ctrl-C on any rank), 'out of time', 'done' (the step limit) or None."""
        tc, world = self.tc, self.world
        if world.size > 1 and step % tc.log_every and step % tc.eval_every and step != tc.max_steps:
            return None  # ranks compare notes only where they sync anyway
        if distributed.any_rank(world, self.flag.requested, self.device):
            return "interrupted"
        if distributed.any_rank(world, elapsed_s >= self.budget_s, self.device):
            return "out of time"
        return "done" if step >= tc.max_steps else None

    def after_evaluation(self, bad_evals: int) -> str | None:
        """'no improvement' once `train.patience` evaluations in a row have not improved (rank 0 decides)."""
        patience = self.tc.patience
        stop = self.world.is_main and patience is not None and bad_evals >= patience
        return "no improvement" if distributed.any_rank(self.world, stop, self.device) else None

    def message(self, reason: str) -> str:
        return {"out of time": f"stopping: train.max_minutes ({self.tc.max_minutes}) spent",
                "no improvement": f"stopping early: no improvement in {self.tc.patience} evaluations",
                "done": f"stopping: train.max_steps ({self.tc.max_steps}) reached"}[reason]

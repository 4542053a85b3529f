"""When training stops, decided in one place: the step limit, the time budget, patience, or Ctrl-C.

A time budget stops training where its plan ends (mt/training/plan.py). It is also a limit: where
the machine slows between the plan's checks (a laptop that throttles, busy neighbours), the run
stops once its training time passes the budget by 5% (30 s at least), evaluates, and is finished;
that stop follows the clock, so it is the one case `--resume` cannot replay. Under torchrun every
rank stops at the same step: decisions from one rank's clock or Ctrl-C are compared across ranks,
only at steps where a sync happens anyway.
"""

from __future__ import annotations

import signal

from mt.config import TrainConfig
from mt.training import distributed
from mt.training.plan import Planner

OVERRUN_SHARE = 0.05  # how far past train.max_minutes a plan may run before the clock stops it
OVERRUN_MIN_S = 30.0  # ...and never less than this, so short budgets keep their plans


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


class StopPolicy:
    """Reads the recipe's stopping rules; `after_step` and `after_evaluation` say whether and why to
    stop. The time budget's plan is `planner`'s (kept in the run's RunState)."""

    def __init__(self, tc: TrainConfig, world: distributed.World, flag: StopFlag, planner: Planner):
        self.tc, self.world, self.flag, self.planner = tc, world, flag, planner
        self.state, self.budget_s = planner.state, planner.budget_s
        self.limit_s = self.budget_s + max(OVERRUN_SHARE * self.budget_s, OVERRUN_MIN_S)
        self.cut_from = None  # the plan the clock cut short, for the message
        self.plan_pending, self.pace_s = False, None  # warm-up is over: an evaluation, then the plan

    def total_steps(self) -> int:
        """Where training will stop: max_steps, or the plan a time budget became."""
        return self.planner.total_steps()

    def seconds_left(self, elapsed_s: float) -> float:
        return self.budget_s - elapsed_s

    def after_step(self, step: int, elapsed_s: float, pace_s: float | None) -> str | None:
        """'interrupted' (Ctrl-C on any rank), 'out of time' (the planned steps are done, or the
        clock passed the budget's limit), 'done' (max_steps) or None. `pace_s` is the measured
        training seconds per step, for the plan."""
        tc, world, planner = self.tc, self.world, self.planner
        plan_now = planner.wanted and step >= planner.at
        if (
            world.size > 1
            and step % tc.log_every
            and step % tc.eval_every
            and step < self.total_steps()
            and not plan_now
        ):
            return None  # ranks compare notes only where they sync anyway
        if distributed.any_rank(world, self.flag.requested):
            return "interrupted"
        if planner.wanted:
            if distributed.any_rank(world, elapsed_s >= self.budget_s):
                planner.spent(step)
            elif plan_now:
                self.plan_pending, self.pace_s = True, pace_s  # the loop evaluates now (`evaluation_due`)
        elif self.budget_s < float("inf") and step < self.total_steps():
            if distributed.any_rank(world, elapsed_s >= self.limit_s):  # the machine slowed
                self.cut_from, self.state.plan.steps = self.state.plan.steps, step  # --resume: finished
            elif step % tc.log_every == 0 and self._past_last_check(step) and planner.since is not None:
                planner.check(step, elapsed_s)
        return self.steps_done(step)

    def _past_last_check(self, step: int) -> bool:
        """Whether no regular evaluation is left to check the plan before it ends: from there the
        logged steps check it (a short run has one or two evaluations, and none in its last part)."""
        every = self.tc.eval_every
        return step % every != 0 and (step // every + 1) * every >= self.total_steps()

    def evaluation_due(self, step: int) -> bool:
        """Whether the loop evaluates after this step: every `eval_every` steps, and once more where
        the plan waits to time an evaluation."""
        return step % self.tc.eval_every == 0 or self.plan_pending

    def steps_done(self, step: int) -> str | None:
        """'out of time' or 'done' once `step` reaches the plan or max_steps, else None."""
        if step >= self.total_steps():
            return "out of time" if self.state.plan is not None and step < self.tc.max_steps else "done"
        return None

    def after_evaluation(self, step: int, bad_evals: int, elapsed_s: float, evaluation_s: float) -> str | None:
        """The plan, where it waited for this evaluation (rank 0's timing decides), or its check at a
        regular evaluation; then 'out of time' where no step is left, or 'no improvement' once
        `train.patience` evaluations in a row have not improved (rank 0 decides)."""
        if self.plan_pending:
            self.plan_pending = False
            self.planner.first(step, elapsed_s, self.pace_s, evaluation_s)
        elif self.state.plan is not None and step % self.tc.eval_every == 0 and step < self.total_steps():
            self.planner.check(step, elapsed_s, evaluation_s)
        if done := self.steps_done(step):
            return done
        patience = self.tc.patience
        stop = self.world.is_main and patience is not None and bad_evals >= patience
        return "no improvement" if distributed.any_rank(self.world, stop) else None

    def message(self, reason: str) -> str:
        minutes = self.tc.max_minutes
        if reason == "out of time" and self.cut_from is not None:
            return (
                f"stopping: {self.limit_s / 60:.1f} min of training reached at step {self.total_steps()} of the "
                f"{self.cut_from} planned for train.max_minutes ({minutes:g}): the steps slowed after the plan was made"
            )
        if reason == "out of time":
            return f"stopping: the {self.total_steps()} steps planned for train.max_minutes ({minutes:g}) are done"
        if reason == "no improvement":
            return f"stopping early: no improvement in {self.tc.patience} evaluations"
        return f"stopping: train.max_steps ({self.tc.max_steps}) reached"

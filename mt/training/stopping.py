"""When training stops, decided in one place: the step limit, the time budget, patience, or Ctrl-C.

A time budget (`train.max_minutes`) becomes a step plan at the end of warm-up: the steps left are
what the budget has left at the pace of warm-up's second half (the first steps allocate and, under
`train.compile`, recompile for new batch shapes), less the evaluations to come. So that their cost
is known, not guessed, the run evaluates once right there and times it (on the fr_en CPU block
about 7.5 s each: left out of the plan, eight of them were a minute of one run's 2.9-minute overrun
of its 20). The plan is saved with the run, so the learning-rate schedule and the stop follow
steps, not the clock, and `--resume` ends exactly where an uninterrupted run with the same plan ends.

Warm-up's pace is a short sample: on the general recipe's two-hour CPU run (Xeon with AMX) it said
0.474 s a step, and the steps after it took 0.51-0.59 s, evaluations 33-46 s against the 32.5 s
timed, so the plan ran 6% over. So every regular evaluation checks the plan against what this
process has measured since the plan's evaluation (or since its first evaluation after a resume),
and so does every `train.log_every`-th step after the last evaluation before the plan's end (a
372-step run on a 2-core EPYC had its one check at step 200, ran faster after it, and ended two
minutes short of its twenty): where finishing the plan at that pace would end further from the
budget than 2% (30 s at least), the plan is made again from there, and the cosine spreads what it
had left over the new steps (the anchor saved with the plan), so the learning rate does not jump.
A steady machine keeps its first plan, and then `--resume` replays the run exactly; a re-made plan
is saved with the next checkpoint, and a run resumed from it follows it.

A short plan takes smaller steps. Where the budget buys fewer steps than `train.short_plan_steps`
at the recipe's `train.grad_accum` micro-batches a step, the first plan halves them for the rest
of the run and plans again at half warm-up's pace (the next regular check corrects that guess). On
a 2-core AVX2 EPYC that makes about 330 steps of the fr_en block in twenty minutes, the same
twenty minutes as steps of half the tokens ended 1.3 and 2.8 validation BLEU higher over two seeds,
and over the tokens of 650 steps 1.1 higher: a run that short learns more from more updates than
from less noisy ones (docs/results.md). A fast machine's plan is long enough and its run is
unchanged. The halving is saved with the plan, so `--resume` takes the same steps.

A long plan trains with dropout. Where the first plan has at least `train.long_plan_steps` steps,
the steps from there train with `train.long_plan_dropout` in place of `model.dropout` (the
attention weights' too, unless the recipe sets `model.attention_dropout`). The fr_en CPU block
trains without dropout, which learns faster over the one to three epochs most CPUs' twenty minutes
buy; a 2-core Xeon with AMX plans some 3,500 steps, nearly five epochs, and there the validation
loss turned up after the third: the same budget with dropout 0.1 ended 2.0 validation BLEU higher,
while at a budget of about 2,050 steps the two ended level (docs/results.md). Dropout slows a step
(by 13% there), which the plan's next check measures and plans for. The switch is saved with the
plan, so `--resume` trains with it.

Where the machine slows between checks (a laptop that throttles, a virtual machine whose neighbours
wake up: one 9-minute char-GPT run took 636 s), the budget is still a limit: past it by 5% (30 s at
least, so that a plan's usual few seconds of overrun never cut a run short) the run stops at the
step it is on, evaluates, and is finished; such a stop follows the clock, so it is the one case
`--resume` cannot replay.

Under torchrun every rank must stop at the same step, so the decisions that depend on one rank's
clock or signal are compared across ranks (plans and checks are rank 0's), and only at steps where
a sync happens anyway.
"""

from __future__ import annotations

import signal
import sys

import torch

from mt.config import TrainConfig
from mt.training import distributed
from mt.training.optim import cosine_progress

OVERRUN_SHARE = 0.05  # how far past train.max_minutes a plan may run before the clock stops it
OVERRUN_MIN_S = 30.0  # ...and never less than this, so short budgets keep their plans
REPLAN_SHARE = 0.02  # how far from the budget a plan may be projected to end before it is made again
REPLAN_MIN_S = 30.0  # ...and never less than this: a steady machine keeps its plan, and resumes replay it


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


def expected_last_step(step: int, pace_s: float | None, seconds_left: float, max_steps: int) -> int:
    """The step training will stop at: max_steps, or sooner where the time budget runs out first at
    `pace_s` seconds a step (evaluations included), so the progress bar's total and ETA tell the truth.
    No pace yet (the first steps, which allocate and compile): max_steps."""
    if seconds_left == float("inf") or not pace_s or pace_s <= 0:
        return max_steps
    return max(step, min(max_steps, step + int(max(seconds_left, 0.0) / pace_s)))


class PaceSincePlan:
    """What this process has measured since the evaluation its plan was made at (after a resume: its
    first evaluation, past the steps that allocate): training seconds a step, seconds an evaluation."""

    def __init__(self, step: int, elapsed_s: float, evaluation_s: float):
        self.step, self.elapsed_s = step, elapsed_s
        self.evaluations = [evaluation_s]  # the mark's own evaluation counts for their mean...
        self.evaluations_since_s = 0.0  # ...but was over before the mark

    def add_evaluation(self, seconds: float) -> None:
        self.evaluations.append(seconds)
        self.evaluations_since_s += seconds

    def step_s(self, step: int, elapsed_s: float) -> float:
        return (elapsed_s - self.elapsed_s - self.evaluations_since_s) / max(step - self.step, 1)

    def evaluation_s(self) -> float:
        return sum(self.evaluations) / len(self.evaluations)


class StopPolicy:
    """Reads the recipe's stopping rules; `after_step` and `after_evaluation` say whether and why to
    stop. `state` is the run's RunState: the step plan is kept in it."""

    def __init__(self, tc: TrainConfig, world: distributed.World, device: torch.device, flag: StopFlag, state):
        self.tc, self.world, self.device, self.flag, self.state = tc, world, device, flag, state
        self.budget_s = tc.max_minutes * 60 if tc.max_minutes else float("inf")
        self.limit_s = self.budget_s + max(OVERRUN_SHARE * self.budget_s, OVERRUN_MIN_S)
        self.cut_from = None  # the plan the clock cut short, for the message
        self.plan_at = max(tc.warmup_steps, 2)  # the cosine starts here: it needs to know its end;
        # and at least one step after the first (which allocates and compiles) is timed
        self.plan_pending, self.pace_s = False, None  # warm-up is over: an evaluation, then the plan
        self.since: PaceSincePlan | None = None  # what the plan is checked against

    def total_steps(self) -> int:
        """Where training will stop: max_steps, or the plan a time budget became."""
        planned = self.state.planned_steps
        return self.tc.max_steps if planned is None else min(planned, self.tc.max_steps)

    def seconds_left(self, elapsed_s: float) -> float:
        return self.budget_s - elapsed_s

    def after_step(self, step: int, elapsed_s: float, pace_s: float | None) -> str | None:
        """'interrupted' (Ctrl-C on any rank), 'out of time' (the planned steps are done, or the
        clock passed the budget's limit), 'done' (max_steps) or None. `pace_s` is the measured
        training seconds per step, for the plan."""
        tc, world = self.tc, self.world
        plan_now = self.budget_s < float("inf") and self.state.planned_steps is None and step >= self.plan_at
        if (
            world.size > 1
            and step % tc.log_every
            and step % tc.eval_every
            and step < self.total_steps()
            and not plan_now
        ):
            return None  # ranks compare notes only where they sync anyway
        if distributed.any_rank(world, self.flag.requested, self.device):
            return "interrupted"
        if self.budget_s < float("inf") and self.state.planned_steps is None:
            over = distributed.any_rank(world, elapsed_s >= self.budget_s, self.device)
            if over:
                self._plan(step, elapsed_s, None, 0.0)
            elif plan_now:
                self.plan_pending, self.pace_s = True, pace_s  # the loop evaluates now (`evaluation_due`)
        elif self.budget_s < float("inf") and step < self.total_steps():
            if distributed.any_rank(world, elapsed_s >= self.limit_s, self.device):  # the machine slowed
                self.cut_from, self.state.planned_steps = self.state.planned_steps, step  # --resume: finished
            elif step % tc.log_every == 0 and self._past_last_check(step) and self.since is not None:
                self._check_plan(step, elapsed_s)
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
            return "out of time" if self.state.planned_steps is not None and step < self.tc.max_steps else "done"
        return None

    def _plan(
        self,
        step: int,
        elapsed_s: float,
        pace_s: float | None,
        evaluation_s: float,
        was: int | None = None,
        projected_s: float = 0.0,
    ) -> None:
        """Turn what is left of the budget into steps at `pace_s` a step plus `evaluation_s` every
        `eval_every` steps and once at the end (none left, or no pace: stop now). `was`: the plan
        this one replaces, which would have ended at `projected_s` of training."""
        steps, every, halved = step, self.tc.eval_every, ""
        left = max(self.budget_s - elapsed_s - evaluation_s, 0.0)
        if pace_s and pace_s > 0:
            steps = step + int(left / (pace_s + evaluation_s / every))
        if was is None:  # on every rank: it syncs
            steps, halved = self._shorter_steps(step, steps, left, pace_s, evaluation_s)
        steps = int(distributed.from_main(self.world, min(steps, self.tc.max_steps), self.device))
        self.state.planned_steps = max(steps, step)
        dropout = self._long_plan_dropout(step, pace_s) if was is None else ""
        if not self.world.is_main:
            return
        pace = f"{pace_s or 0:.3f} s a step and {evaluation_s:.1f} s an evaluation every {every} steps"
        planned = self.state.planned_steps
        if was is None:
            print(
                f"time budget: {self.tc.max_minutes:g} min at {pace} plans {halved}{planned} steps{dropout}",
                file=sys.stderr,
            )
        else:
            print(
                f"time budget: since its plan the run has taken {pace}; the {was} steps planned would "
                f"end at {projected_s / 60:.1f} min, so at step {step} it plans {planned}",
                file=sys.stderr,
            )

    def _shorter_steps(
        self, step: int, steps: int, left: float, pace_s: float | None, evaluation_s: float
    ) -> tuple[int, str]:
        """Where a first plan's `steps` fall short of train.short_plan_steps, half the micro-batches
        a step from here (rank 0 decides; `state.grad_accum`) and the steps that buys at half the
        pace; returns the steps and what to say of the change. No pace (the budget ran out before
        the plan): no change."""
        accum, wanted = self.tc.grad_accum, self.tc.short_plan_steps
        short = bool(pace_s) and wanted is not None and steps < wanted and accum > 1
        if not distributed.from_main(self.world, float(short), self.device):
            return steps, ""
        fewer = accum // 2
        self.state.grad_accum = fewer
        every = self.tc.eval_every
        more = step + int(left / (pace_s * fewer / accum + evaluation_s / every)) if pace_s else steps  # rank 0's wins
        said = f"{steps} steps of {accum} micro-batches, under train.short_plan_steps ({wanted}), "
        return more, said + f"so steps of {fewer} from here: "

    def _long_plan_dropout(self, step: int, pace_s: float | None) -> str:
        """Where a first plan reaches train.long_plan_steps, train.long_plan_dropout from here
        (`state.dropout`; the plan is rank 0's, so every rank agrees); returns what to say of it.
        The steps slow down with it, which the plan's next check measures."""
        wanted, planned = self.tc.long_plan_steps, self.state.planned_steps
        if not pace_s or wanted is None or planned - step <= 0 or planned < wanted:
            return ""
        self.state.dropout = self.tc.long_plan_dropout
        return f", at least train.long_plan_steps ({wanted}), so dropout {self.state.dropout:g} from here"

    def after_evaluation(self, step: int, bad_evals: int, elapsed_s: float, evaluation_s: float) -> str | None:
        """The plan, where it waited for this evaluation (rank 0's timing decides), or its check at a
        regular evaluation; then 'out of time' where no step is left, or 'no improvement' once
        `train.patience` evaluations in a row have not improved (rank 0 decides)."""
        if self.plan_pending:
            self.plan_pending = False
            self._plan(step, elapsed_s, self.pace_s, evaluation_s)
            self.since = PaceSincePlan(step, elapsed_s, evaluation_s)
        elif self.state.planned_steps is not None and step % self.tc.eval_every == 0 and step < self.total_steps():
            self._check_plan(step, elapsed_s, evaluation_s)
        if done := self.steps_done(step):
            return done
        patience = self.tc.patience
        stop = self.world.is_main and patience is not None and bad_evals >= patience
        return "no improvement" if distributed.any_rank(self.world, stop, self.device) else None

    def _check_plan(self, step: int, elapsed_s: float, evaluation_s: float | None = None) -> None:
        """Make the plan again where the pace since it was made says it would end more than 2% (30 s
        at least) from the budget; the cosine goes on from where it is (`state.plan_anchor`).
        `evaluation_s`: the evaluation just made, where the check follows one."""
        if self.since is None:  # resumed: measure from here
            self.since = PaceSincePlan(step, elapsed_s, evaluation_s)
            return
        if evaluation_s is not None:
            self.since.add_evaluation(evaluation_s)
        step_s, evaluation_s = self.since.step_s(step, elapsed_s), self.since.evaluation_s()
        was = self.total_steps()
        projected = elapsed_s + evaluation_s + (was - step) * (step_s + evaluation_s / self.tc.eval_every)
        off = abs(projected - self.budget_s) > max(REPLAN_SHARE * self.budget_s, REPLAN_MIN_S)
        if distributed.from_main(self.world, float(off), self.device):
            progress = cosine_progress(step, self.tc, was, self.state.plan_anchor)
            self._plan(step, elapsed_s, step_s, evaluation_s, was, projected)
            self.state.plan_anchor = (step, progress)

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

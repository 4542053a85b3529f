"""The step plan: what a time budget (`train.max_minutes`) becomes, and what it adapts to the machine.

At the end of warm-up the run evaluates once and times it; the steps left are what the budget has
left at the pace of warm-up's second half, less the evaluations to come. The plan is one `Plan`,
saved in last.pt, so the schedule and the stop follow steps, not the clock, and `--resume` replays
the run. Warm-up is a short sample, so evaluations (and, past the last one, logged steps) check the
plan against the pace measured since; one projected to end more than 2% off the budget is made
again, and the cosine spreads what it had left over the new steps (`Plan.anchor`).

The first plan also applies `train.plan` (`PlanRule`), one rule in planned epochs: a budget that
buys few epochs takes steps of half the micro-batches (more updates), one that buys many trains
with dropout (less overfitting). Figures behind the thresholds: docs/results.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

from mt.config import TrainConfig
from mt.training import distributed
from mt.training.optim import cosine_progress

REPLAN_SHARE = 0.02  # how far from the budget a plan may be projected to end before it is made again
REPLAN_MIN_S = 30.0  # ...and never less than this: a steady machine keeps its plan, and resumes replay it


@dataclass
class Plan:
    """What a time budget became; saved in last.pt as one entry."""

    steps: int  # where training stops
    anchor: tuple[int, float] | None = None  # (step, cosine progress) where a re-made plan took over
    grad_accum: int | None = None  # micro-batches a step from warm-up's end, where the rule halved them
    dropout: float | None = None  # the model's dropout from warm-up's end, where the rule raised it

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, saved: dict | None) -> Plan | None:
        if saved is None:
            return None
        anchor = saved.get("anchor")
        return cls(**{**saved, "anchor": tuple(anchor) if anchor else None})

    @classmethod
    def from_checkpoint(cls, ckpt: dict) -> Plan | None:
        """The plan a checkpoint holds, if any: one "plan" entry, or in a run saved before the
        plan was one object, the four entries it was then (which older runs still carry)."""
        if "plan" in ckpt or ckpt.get("planned_steps") is None:
            return cls.from_dict(ckpt.get("plan"))
        old = ("planned_steps", "plan_anchor", "grad_accum", "dropout")
        return cls.from_dict(dict(zip(("steps", "anchor", "grad_accum", "dropout"), (ckpt.get(k) for k in old))))


def expected_last_step(step: int, pace_s: float | None, seconds_left: float, max_steps: int) -> int:
    """The step training will stop at before a plan exists, for the progress bar: max_steps, or
    sooner where the budget runs out first at `pace_s` seconds a step."""
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


class Planner:
    """Makes and checks the plan kept in `state.plan`. `batches_per_epoch` counts the task's
    micro-batches in one epoch, asked only when a first plan is made (None: the rule leaves the run
    alone). Decisions are rank 0's, shared with every rank."""

    def __init__(self, tc: TrainConfig, world, state, batches_per_epoch: Callable[[], int] | None = None):
        self.tc, self.world, self.state = tc, world, state
        self.budget_s = tc.max_minutes * 60 if tc.max_minutes else float("inf")
        self.batches_per_epoch = batches_per_epoch
        self.at = max(tc.warmup_steps, 2)  # the cosine starts here; at least one step after the first is timed
        self.since: PaceSincePlan | None = None  # what the plan is checked against

    @property
    def wanted(self) -> bool:
        """Whether a budget still waits for its first plan."""
        return self.budget_s < float("inf") and self.state.plan is None

    def total_steps(self) -> int:
        plan = self.state.plan
        return self.tc.max_steps if plan is None else min(plan.steps, self.tc.max_steps)

    def spent(self, step: int) -> None:
        """The budget ran out before a plan: stop at `step`."""
        self.state.plan = Plan(steps=step)

    def first(self, step: int, elapsed_s: float, pace_s: float | None, evaluation_s: float) -> None:
        """The plan at warm-up's end: the budget's steps at `pace_s` a step plus `evaluation_s` every
        `eval_every` steps, then the rule, which may change the steps' size and the dropout."""
        left = max(self.budget_s - elapsed_s - evaluation_s, 0.0)
        steps = int(distributed.from_main(self.world, self._steps_in(step, left, pace_s, evaluation_s, 1.0)))
        epochs = self._epochs(steps)  # rank 0's steps: every rank applies the rule alike
        plan, said = Plan(steps=steps), ""
        rule, accum = self.tc.plan, self.tc.grad_accum
        if pace_s and epochs is not None and rule.few_epochs is not None and epochs < rule.few_epochs and accum > 1:
            plan.grad_accum = accum // 2
            plan.steps = self._steps_in(step, left, pace_s, evaluation_s, plan.grad_accum / accum)
            said += f", under train.plan.few_epochs ({rule.few_epochs:g}): steps of {plan.grad_accum} micro-batches"
        if pace_s and epochs is not None and rule.many_epochs is not None and epochs >= rule.many_epochs:
            plan.dropout = rule.dropout
            said += f", at least train.plan.many_epochs ({rule.many_epochs:g}): dropout {rule.dropout:g}"
        self._adopt(plan, step)
        self.since = PaceSincePlan(step, elapsed_s, evaluation_s)
        about = f" ({epochs:.2f} epochs)" if epochs is not None else ""
        self._say(
            f"time budget: {self.tc.max_minutes:g} min at {self._pace(pace_s, evaluation_s)} plans "
            f"{min(steps, self.tc.max_steps)} steps{about}{said}"
            + (f"; {self.state.plan.steps} steps" if plan.grad_accum else "")
        )

    def check(self, step: int, elapsed_s: float, evaluation_s: float | None = None) -> None:
        """Make the plan again where the pace since it was made says it would end more than 2% (30 s
        at least) from the budget. `evaluation_s`: the evaluation just made, where one was."""
        if self.since is None:  # resumed: measure from here
            self.since = PaceSincePlan(step, elapsed_s, evaluation_s)
            return
        if evaluation_s is not None:
            self.since.add_evaluation(evaluation_s)
        step_s, evaluation_s = self.since.step_s(step, elapsed_s), self.since.evaluation_s()
        was = self.total_steps()
        projected = elapsed_s + evaluation_s + (was - step) * (step_s + evaluation_s / self.tc.eval_every)
        off = abs(projected - self.budget_s) > max(REPLAN_SHARE * self.budget_s, REPLAN_MIN_S)
        off = off and not (was >= self.tc.max_steps and projected < self.budget_s)  # max_steps ends it first
        if not distributed.from_main(self.world, float(off)):
            return
        plan = self.state.plan
        progress = cosine_progress(step, self.tc, was, plan.anchor)
        left = max(self.budget_s - elapsed_s - evaluation_s, 0.0)
        kept = {"grad_accum": plan.grad_accum, "dropout": plan.dropout}
        self._adopt(Plan(self._steps_in(step, left, step_s, evaluation_s, 1.0), (step, progress), **kept), step)
        self._say(
            f"time budget: since its plan the run has taken {self._pace(step_s, evaluation_s)}; the {was} steps "
            f"planned would end at {projected / 60:.1f} min, so at step {step} it plans {self.state.plan.steps}"
        )

    def _steps_in(self, step: int, left: float, pace_s: float | None, evaluation_s: float, share: float) -> int:
        """The step the budget's `left` seconds reach, with steps of `share` of the timed pace."""
        if not pace_s or pace_s <= 0:
            return step
        return step + int(left / (pace_s * share + evaluation_s / self.tc.eval_every))

    def _epochs(self, steps: int) -> float | None:
        if self.batches_per_epoch is None:
            return None
        return steps * self.tc.grad_accum * self.world.size / max(self.batches_per_epoch(), 1)

    def _adopt(self, plan: Plan, step: int) -> None:
        """Rank 0's plan on every rank, never before `step` nor past max_steps."""
        steps = int(distributed.from_main(self.world, min(plan.steps, self.tc.max_steps)))
        plan.steps = max(steps, step)
        self.state.plan = plan

    def _pace(self, pace_s: float | None, evaluation_s: float) -> str:
        return f"{pace_s or 0:.3f} s a step and {evaluation_s:.1f} s an evaluation every {self.tc.eval_every} steps"

    def _say(self, line: str) -> None:
        if self.world.is_main:
            print(line, file=sys.stderr)

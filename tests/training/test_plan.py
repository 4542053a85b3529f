"""The step plan (mt/training/plan.py): a time budget becomes steps at warm-up's end, is checked and
made again, stops the run, resumes exactly, and adapts the run by the epochs it covers."""

import json
import shutil

import pytest
import torch
from helpers import (
    TickingClock,
    assert_same_weights,
    interrupt_after,
    interrupt_and_resume,
    run_budgeted,
    run_train,
)

from mt.checkpoint import load_checkpoint, save_checkpoint
from mt.config import TrainConfig
from mt.cpu.dropout import Dropout
from mt.model import Attention, set_dropout
from mt.training.distributed import World
from mt.training.lm_task import LanguageModelTask
from mt.training.optim import lr_at
from mt.training.plan import Plan, Planner, expected_last_step
from mt.training.run_dir import RunState
from mt.training.stopping import StopFlag, StopPolicy


def policy_for(tc: TrainConfig, state: RunState, batches_per_epoch: int | None = None) -> StopPolicy:
    epoch = None if batches_per_epoch is None else (lambda: batches_per_epoch)
    planner = Planner(tc, World(), state, epoch)
    return StopPolicy(tc, World(), StopFlag(), planner)


def planned(tc: TrainConfig, batches_per_epoch: int | None = None) -> tuple[RunState, StopPolicy]:
    state = RunState()
    return state, policy_for(tc, state, batches_per_epoch)


def first_plan(capsys, batches_per_epoch: int | None = None, **settings) -> tuple[RunState, str]:
    """The plan of a 10-minute budget at the end of a 30-step warm-up: 1 s a step, 40 s gone, an
    evaluation of 10 s every 50 steps (488 steps at the recipe's step size)."""
    tc = TrainConfig(max_minutes=10, max_steps=100_000, warmup_steps=30, eval_every=50, **settings)
    state, policy = planned(tc, batches_per_epoch)
    assert policy.after_step(30, 30.0, 1.0) is None
    assert policy.after_evaluation(30, 0, 40.0, 10.0) is None
    return state, capsys.readouterr().err


def test_progress_bar_total_follows_the_time_budget():
    assert expected_last_step(10, 1.0, float("inf"), 500) == 500  # no budget: the step limit
    assert expected_last_step(10, 1.0, 30.0, 500) == 40  # 1 s a step, 30 s left
    assert expected_last_step(10, 1.0, 3000.0, 500) == 500  # the step limit comes first
    assert expected_last_step(10, 1.0, -5.0, 500) == 10  # already over budget
    assert expected_last_step(1, None, 30.0, 500) == 500  # no pace yet: the step limit


def test_a_plans_pace_leaves_out_the_first_steps_where_torch_compile_compiles(
    toy_text_corpus, tmp_path, monkeypatch, capsys
):
    """Under train.compile the first new batch shapes recompile (about 130 s over the first 10 steps
    of the fr_en cuda: block on an H200, then 0.055 s a step). The plan times only the second half
    of warm-up, so a slow third step does not shrink it."""
    from mt.training import trainer

    clock = TickingClock(0.01)
    monkeypatch.setattr(trainer, "time", clock)
    original = LanguageModelTask.train_batches

    def batches(self):
        for i, batch in enumerate(original(self)):
            if i == 2:
                clock.now += 200.0  # the third step recompiles for a new shape
            yield batch

    monkeypatch.setattr(LanguageModelTask, "train_batches", batches)
    run_train(tmp_path / "run", "train.max_minutes=10", "train.max_steps=20", "train.warmup_steps=10")
    plan = capsys.readouterr().err.split("time budget: 10 min at ")[1]
    assert float(plan.split(" s a step")[0]) < 1.0  # timed from step 5; from step 1 it was 22 s a step
    assert load_checkpoint(tmp_path / "run" / "last.pt")["step"] == 20  # the plan is not cut short


def test_a_time_budget_with_no_warm_up_still_plans_from_a_timed_step(toy_text_corpus, tmp_path, capsys):
    """With train.warmup_steps=0 the plan waits for one timed step; made after the first, it had no
    pace and stopped the run there."""
    run_train(tmp_path / "run", "train.max_minutes=10", "train.warmup_steps=0")
    assert "plans 12 steps" in capsys.readouterr().err
    assert load_checkpoint(tmp_path / "run" / "last.pt")["step"] == 12


def test_a_time_budget_plans_the_evaluations_it_times_at_the_end_of_warm_up(capsys):
    """At the end of warm-up the loop evaluates once, timed; the plan leaves room for an evaluation
    every `eval_every` steps and one at the end, so the budget holds with them."""
    tc = TrainConfig(max_minutes=10, max_steps=100_000, warmup_steps=30, eval_every=50)
    state, policy = planned(tc)
    assert policy.after_step(29, 29.0, 1.0) is None and not policy.evaluation_due(29)
    assert policy.after_step(30, 30.0, 1.0) is None and state.plan is None
    assert policy.evaluation_due(30)  # not a multiple of eval_every: the evaluation the plan times
    # 40 s after the evaluation of 10 s: 600 - 40 - 10 (the last one) = 550 s left, 1 + 10/50 s a step
    assert policy.after_evaluation(30, 0, 40.0, 10.0) is None
    assert state.plan.steps == 30 + int(550 / 1.2) and not policy.evaluation_due(31)
    assert "10.0 s an evaluation every 50 steps plans 488 steps" in capsys.readouterr().err
    steps_at_a_step_a_second = 30 + (600 - 40)  # what the plan was before evaluations counted
    assert state.plan.steps < steps_at_a_step_a_second
    assert policy.after_step(487, 625.0, 1.0) is None  # a plan's usual seconds over its budget: not cut short
    assert policy.after_step(488, 626.0, 1.0) == "out of time"


def test_a_run_that_slows_after_its_plan_stops_at_the_budgets_limit(capsys):
    """The plan assumes warm-up's pace; where the machine slows later, the run still stops 5% (at
    least 30 s) past train.max_minutes, and the plan saved with it says it is finished."""
    tc = TrainConfig(max_minutes=10, max_steps=100_000, warmup_steps=30, eval_every=50)
    state, policy = planned(tc)
    policy.after_step(30, 30.0, 1.0)
    policy.after_evaluation(30, 0, 40.0, 10.0)
    assert state.plan.steps == 488
    assert policy.after_step(300, 629.9, 2.0) is None  # twice as slow since the plan: 630 s is the limit
    assert policy.after_step(301, 630.0, 2.0) == "out of time" and state.plan.steps == 301
    assert "10.5 min of training reached at step 301 of the 488 planned" in policy.message("out of time")
    resumed = policy_for(tc, state)
    assert resumed.steps_done(301) == "out of time"
    short = planned(TrainConfig(max_minutes=1))[1]
    assert short.limit_s == 90.0  # a short budget gets 30 s, not 3


def test_the_budgets_limit_stops_a_real_run_that_slowed_and_resume_finds_it_finished(
    toy_text_corpus, tmp_path, monkeypatch, capsys
):
    from mt.training import trainer

    clock = TickingClock(0.02)
    monkeypatch.setattr(trainer, "time", clock)
    plan = Planner.first

    def plan_then_slow_down(self, *args):
        plan(self, *args)
        clock.tick = 1.0  # from here on the machine is far slower than warm-up said

    monkeypatch.setattr(Planner, "first", plan_then_slow_down)
    # no check before the limit (no evaluation, no logged step): it would make the plan again first
    budget = ["train.max_minutes=0.05", "train.max_steps=100000", "train.eval_every=1000", "train.log_every=1000"]
    run_train(tmp_path / "run", *budget)
    err = capsys.readouterr().err
    planned = int(err.split(" plans ")[1].split()[0])
    ckpt = load_checkpoint(tmp_path / "run" / "last.pt")
    assert ckpt["plan"]["steps"] == ckpt["step"] < planned
    assert f"min of training reached at step {ckpt['step']} of the {planned} planned" in err
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == ckpt["step"]  # the model it stopped with was evaluated
    run_train(tmp_path / "run", *budget, "--resume")
    assert load_checkpoint(tmp_path / "run" / "last.pt")["step"] == ckpt["step"]
    assert f"the {ckpt['step']} steps planned for train.max_minutes (0.05) are done" in capsys.readouterr().err


def test_the_evaluation_that_times_a_plan_is_logged_but_does_not_compete_for_best(toy_text_corpus, tmp_path):
    """An early model must not become best.pt on a tie, nor join the averaged snapshots."""
    run_train(
        tmp_path / "run", "train.max_minutes=5", "train.max_steps=6", "train.eval_every=100", "train.average_last=2"
    )
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 6]  # warm-up ends at step 2: the timed evaluation
    assert load_checkpoint(tmp_path / "run" / "best.pt")["step"] == 6
    assert sorted(p.name for p in (tmp_path / "run" / "snapshots").iterdir()) == ["step-00000006.pt"]


def test_a_plan_the_pace_since_has_proved_wrong_is_made_again_and_the_rate_does_not_jump(capsys):
    """Regular evaluations check the plan against the pace measured since it was made; 2% (30 s at
    least) off the budget, it is made again, and the cosine goes on from where it was."""
    tc = TrainConfig(max_minutes=100, max_steps=100_000, warmup_steps=30, eval_every=50, lr=1e-3, min_lr=1e-4)
    state, policy = planned(tc)
    policy.after_step(30, 30.0, 1.0)
    policy.after_evaluation(30, 0, 40.0, 10.0)
    first = 30 + int((6000 - 40 - 10) / 1.2)
    assert state.plan.steps == first
    # 20 steps at the plan's 1 s and an evaluation of 10 s: on course, kept
    assert policy.after_evaluation(50, 0, 40.0 + 20 + 10, 10.0) is None
    assert state.plan.steps == first and state.plan.anchor is None
    assert policy.after_evaluation(51, 0, 500.0, 10.0) is None and state.plan.steps == first  # not regular
    # 50 more at 1.5 s: 95 s over 70 steps since the plan, 1.357 s a step, would end far past 100 min
    lr_before = lr_at(100, tc, first)
    assert policy.after_evaluation(100, 0, 70.0 + 75 + 10, 10.0) is None
    replanned = 100 + int((6000 - 155 - 10) / (95 / 70 + 10 / 50))
    assert state.plan.steps == replanned < first
    assert f"the {first} steps planned would end at" in capsys.readouterr().err
    assert state.plan.anchor[0] == 100
    assert lr_at(100, tc, replanned, state.plan.anchor) == pytest.approx(lr_before)  # no jump
    assert lr_at(replanned, tc, replanned, state.plan.anchor) == pytest.approx(1e-4)  # and it still anneals
    rates = [lr_at(s, tc, replanned, state.plan.anchor) for s in range(100, replanned + 1, 50)]
    assert rates == sorted(rates, reverse=True)
    # a resumed run measures from its first regular evaluation, past the steps that allocate
    resumed = policy_for(tc, state)
    assert resumed.after_evaluation(150, 0, 5000.0, 10.0) is None and state.plan.steps == replanned


def test_after_the_last_evaluation_before_its_end_the_plan_is_checked_every_log_every_steps(capsys):
    """A short run has one or two evaluations, and none in its last part: from the last one before
    the plan's end, the logged steps check the plan, with the evaluations' mean time; earlier
    logged steps, unlogged steps, and a resumed run that has timed nothing yet do not."""
    tc = TrainConfig(max_minutes=10, max_steps=100_000, warmup_steps=30, eval_every=200, log_every=10)
    state, policy = planned(tc)
    policy.after_step(30, 30.0, 1.0)
    policy.after_evaluation(30, 0, 40.0, 10.0)
    first = 30 + int((600 - 40 - 10) / (1.0 + 10 / 200))
    assert first == 553 and state.plan.steps == first
    assert policy.after_step(100, 80.0, 1.0) is None and state.plan.steps == first  # an evaluation is to come
    assert policy.after_evaluation(400, 0, 420.0, 10.0) is None and state.plan.steps == first  # 1 s a step
    # from here 0.3 s a step: the logged step 410 finds the plan on course, 425 is not logged, and at
    # 430 (379 s over 400 steps since the plan) the plan would end 38 s before the budget
    assert policy.after_step(410, 423.0, 1.0) is None and state.plan.steps == first
    assert policy.after_step(425, 427.5, 1.0) is None and state.plan.steps == first
    assert policy.after_step(430, 429.0, 1.0) is None
    assert state.plan.steps == 430 + int((600 - 429 - 10) / (379 / 400 + 10 / 200)) > first
    assert "so at step 430 it plans" in capsys.readouterr().err and state.plan.anchor[0] == 430
    resumed = policy_for(tc, RunState(plan=Plan(first)))
    assert resumed.after_step(430, 429.0, 1.0) is None and resumed.state.plan.steps == first


def test_a_run_that_slows_makes_its_plan_again_ends_in_its_budget_and_resumes_exactly(
    toy_text_corpus, tmp_path, monkeypatch, capsys
):
    """The first plan is made at warm-up's pace; the steps then run at another, so the evaluation
    after it makes the plan again. The run ends at the new plan, inside its budget, and a run
    interrupted after the new plan and resumed ends with the same weights."""
    from mt.training import trainer

    clock = TickingClock(2.0)
    monkeypatch.setattr(trainer, "time", clock)
    plan = Planner.first

    def plan_then_change_pace(self, *args, **kwargs):
        plan(self, *args, **kwargs)
        clock.tick = 2.5  # warm-up's second half is no guide to what follows

    monkeypatch.setattr(Planner, "first", plan_then_change_pace)
    budget = ["train.max_minutes=30", "train.max_steps=100000", "train.eval_every=20"]
    run_train(tmp_path / "straight", *budget)
    err = capsys.readouterr().err
    first, again = (int(part.split()[0]) for part in err.split(" plans ")[1:3])
    assert again != first and "so at step 20 it plans" in err
    straight = load_checkpoint(tmp_path / "straight" / "last.pt")
    assert straight["step"] == straight["plan"]["steps"] == again and straight["plan"]["anchor"][0] == 20
    assert abs(straight["elapsed_s"] - 1800) < 36  # within 2% of the budget
    clock.tick = 2.0
    with monkeypatch.context() as m:
        interrupt_after(m, 30)
        with pytest.raises(SystemExit):
            run_train(tmp_path / "resumed", *budget)
    assert load_checkpoint(tmp_path / "resumed" / "last.pt")["plan"]["steps"] == again
    shutil.copytree(tmp_path / "resumed", tmp_path / "old")
    saved_before_the_plan_was_one_entry(tmp_path / "old" / "last.pt")
    run_train(tmp_path / "resumed", *budget, "--resume")
    resumed = load_checkpoint(tmp_path / "resumed" / "last.pt")
    assert resumed["step"] == again and resumed["plan"] == straight["plan"]
    assert_same_weights(resumed, straight)
    run_train(tmp_path / "old", *budget, "--resume")  # an older run resumes with its plan too
    old = load_checkpoint(tmp_path / "old" / "last.pt")
    assert old["step"] == again and old["plan"] == straight["plan"]
    assert_same_weights(old, straight)


def saved_before_the_plan_was_one_entry(path):
    """Rewrite a last.pt as runs saved it before the plan was one entry: four entries of their own."""
    ckpt = load_checkpoint(path)
    plan = ckpt.pop("plan")
    old = ("planned_steps", "plan_anchor", "grad_accum", "dropout")
    save_checkpoint(path, ckpt | dict(zip(old, (plan["steps"], plan["anchor"], plan["grad_accum"], plan["dropout"]))))


def test_cosine_schedule_ends_at_the_planned_step():
    tc = TrainConfig(lr=1e-3, min_lr=1e-4, warmup_steps=10, max_steps=1000)
    assert lr_at(4, tc, 190) == pytest.approx(5e-4)  # warmup goes by steps
    assert lr_at(10, tc) == pytest.approx(1e-3)
    assert lr_at(100, tc, 190) == pytest.approx(5.5e-4)  # half way to the plan: half way down the cosine
    assert lr_at(190, tc, 190) == pytest.approx(1e-4)
    assert lr_at(505, tc) == pytest.approx(5.5e-4)  # no plan: max_steps ends it


def test_a_time_budget_becomes_a_saved_step_plan_and_resumes_exactly(toy_text_corpus, tmp_path, monkeypatch, capsys):
    """The budget is turned into steps at the end of warm-up and saved; a run interrupted after that
    and resumed ends where a run given that many steps and no budget ends, bit for bit."""
    from mt.training import trainer

    budget = ["train.max_minutes=0.05", "train.max_steps=100000", "train.eval_every=5"]
    monkeypatch.setattr(trainer, "time", TickingClock(0.02))
    with monkeypatch.context() as m:
        interrupt_after(m, 8)
        with pytest.raises(SystemExit):
            run_train(tmp_path / "budget", *budget)
    interrupted = load_checkpoint(tmp_path / "budget" / "last.pt")
    planned = interrupted["plan"]["steps"]
    assert planned is not None and interrupted["step"] < planned  # stopped after the plan and before its end
    assert "time budget: 0.05 min" in capsys.readouterr().err
    run_train(tmp_path / "budget", *budget, "--resume")
    run_train(tmp_path / "steps", f"train.max_steps={planned}", "train.eval_every=5")
    a, b = load_checkpoint(tmp_path / "budget" / "last.pt"), load_checkpoint(tmp_path / "steps" / "last.pt")
    assert a["step"] == b["step"] == planned
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


# The rule in planned epochs (train.plan): few epochs take smaller steps, many train with dropout.


def test_a_plan_of_few_epochs_halves_the_micro_batches_and_plans_at_half_the_pace(capsys):
    state, err = first_plan(capsys, batches_per_epoch=2000, grad_accum=4)  # 488 x 4 / 2000: 0.98 epochs
    # 550 s left at half a second a step and 10 s every 50 steps
    assert state.plan.grad_accum == 2 and state.plan.steps == 30 + int(550 / 0.7) == 815
    assert state.plan.dropout is None
    assert "plans 488 steps (0.98 epochs), under train.plan.few_epochs (1.1): steps of 2 micro-batches; 815" in err


def test_a_plan_of_many_epochs_trains_with_dropout_and_says_so(capsys):
    state, err = first_plan(capsys, batches_per_epoch=100)  # 4.88 epochs
    assert state.plan.dropout == 0.1 and state.plan.steps == 488 and state.plan.grad_accum is None
    assert "plans 488 steps (4.88 epochs), at least train.plan.many_epochs (3.25): dropout 0.1" in err


@pytest.mark.parametrize(
    "batches_per_epoch, settings",
    [
        (1000, {"grad_accum": 4}),  # 1.95 epochs of four micro-batches: neither few nor many
        (None, {"grad_accum": 4}),  # a task without epochs
        (2000, {"grad_accum": 1}),  # one micro-batch a step cannot be halved
        (100, {"plan": {"few_epochs": None, "many_epochs": None}}),  # the rule turned off
    ],
)
def test_other_plans_keep_the_recipes_steps_and_dropout(capsys, batches_per_epoch, settings):
    from mt.config import PlanRule

    if "plan" in settings:
        settings = {"plan": PlanRule(**settings["plan"])}
    state, err = first_plan(capsys, batches_per_epoch, **settings)
    assert state.plan == Plan(steps=488)
    assert "micro-batches" not in err and "dropout" not in err


def test_a_remade_plan_or_a_budget_spent_before_the_plan_never_applies_the_rule(capsys):
    """Only the first plan, made from warm-up's pace, applies the rule; the checks that make a plan
    again keep what it decided, and a budget spent during warm-up has no pace to plan from."""
    tc = TrainConfig(max_minutes=10, max_steps=100_000, warmup_steps=30, eval_every=50, grad_accum=4)
    state, policy = planned(tc, batches_per_epoch=100_000)
    policy.after_step(30, 30.0, 1.0)
    policy.after_evaluation(30, 0, 40.0, 10.0)
    assert state.plan.grad_accum == 2
    policy.after_step(100, 300.0, 1.0)
    policy.after_evaluation(100, 0, 310.0, 10.0)  # 3.7 s a step since the plan: made again
    assert "so at step 100 it plans" in capsys.readouterr().err and state.plan.grad_accum == 2
    spent, policy = planned(tc, batches_per_epoch=1)
    assert policy.after_step(10, 601.0, 1.0) == "out of time"
    assert spent.plan == Plan(steps=10)


@pytest.mark.parametrize("setting", ["train.plan.few_epochs=0", "train.plan.many_epochs=-1", "train.plan.dropout=1.0"])
def test_bad_plan_settings_are_one_line(toy_text_corpus, tmp_path, capsys, setting):
    with pytest.raises(SystemExit) as stop:
        run_train(tmp_path / "run", setting)
    assert stop.value.code == 2
    key, value = setting.split("=")
    says = "must be in [0, 1), got 1.0" if key.endswith("dropout") else f"must be positive or null (off), got {value}"
    assert f"{key} {says}" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_set_dropout_reaches_every_dropout_and_the_attention_weights_unless_told_not_to():
    model = torch.nn.Sequential(Attention(8, 2, 0.0, True), Dropout(0.0), Attention(8, 2, 0.0, True, 0.3))
    set_dropout(model, 0.2, attention=False)
    assert [m.resid_dropout.p for m in (model[0], model[2])] == [0.2, 0.2] and model[1].p == 0.2
    assert [model[0].dropout, model[2].dropout] == [0.0, 0.3]
    set_dropout(model, 0.25)
    assert [model[0].dropout, model[2].dropout, model[1].p] == [0.25, 0.25, 0.25]


def watch_steps(monkeypatch, look) -> list:
    """What `look(trainer, batches)` sees at each training step, as the trainer takes it."""
    from mt.training.trainer import Trainer

    seen, step = [], Trainer.train_step

    def watching(self, batches, seed=None):
        batches = look(self, batches, seen)
        return step(self, batches, seed)

    monkeypatch.setattr(Trainer, "train_step", watching)
    return seen


def count_micro_batches(trainer, batches, seen):
    seen.append(0)

    def tap():
        while True:
            seen[-1] += 1
            yield next(batches)

    return tap()


def note_dropout(trainer, batches, seen):
    seen.append({m.p for m in trainer.model.modules() if isinstance(m, Dropout)})
    return batches


def test_few_epochs_take_half_the_micro_batches_from_the_plan_on_and_resume_exactly(
    toy_text_corpus, tmp_path, monkeypatch, capsys
):
    """Warm-up's steps take the recipe's four micro-batches, every step after the plan two; the
    halving is saved with the plan, and a run interrupted after it and resumed ends with the
    weights of the run that was not."""
    budget = ["train.max_minutes=0.05", "train.max_steps=100000", "train.eval_every=5"]
    budget += ["train.grad_accum=4", "train.plan.few_epochs=100000", "train.warmup_steps=4"]
    counts = watch_steps(monkeypatch, count_micro_batches)
    straight = run_budgeted(tmp_path / "straight", budget, monkeypatch)
    assert "under train.plan.few_epochs (100000): steps of 2 micro-batches" in capsys.readouterr().err
    assert straight["plan"]["grad_accum"] == 2 and straight["step"] == straight["plan"]["steps"] == len(counts) > 8
    assert counts == [4] * 4 + [2] * (len(counts) - 4)
    interrupted, resumed = interrupt_and_resume(tmp_path / "resumed", budget, monkeypatch, 4 * 4 + 2 * 2, counts)
    assert interrupted["plan"]["grad_accum"] == 2 and 4 < interrupted["step"] < straight["step"]
    assert set(counts) == {2}
    assert resumed["step"] == straight["step"] and resumed["plan"] == straight["plan"]
    assert_same_weights(resumed, straight)


def test_many_epochs_train_with_dropout_from_the_plan_on_and_resume_exactly(
    toy_text_corpus, tmp_path, monkeypatch, capsys
):
    """Warm-up's steps train without dropout, every step after the plan with it; the switch is
    saved with the plan, and a run interrupted after it and resumed ends with the weights of the
    run that was not."""
    budget = ["train.max_minutes=0.05", "train.max_steps=100000", "train.eval_every=5", "train.warmup_steps=4"]
    budget += ["model.dropout=0.0", "train.plan.many_epochs=0.001", "train.plan.dropout=0.2"]
    seen = watch_steps(monkeypatch, note_dropout)
    straight = run_budgeted(tmp_path / "straight", budget, monkeypatch)
    assert "at least train.plan.many_epochs (0.001): dropout 0.2" in capsys.readouterr().err
    assert straight["plan"]["dropout"] == 0.2 and straight["step"] == straight["plan"]["steps"] == len(seen) > 8
    assert seen == [{0.0}] * 4 + [{0.2}] * (len(seen) - 4)
    interrupted, resumed = interrupt_and_resume(tmp_path / "resumed", budget, monkeypatch, 7, seen)
    assert interrupted["plan"]["dropout"] == 0.2 and 4 < interrupted["step"] < straight["step"]
    assert seen and all(p == {0.2} for p in seen)
    assert resumed["step"] == straight["step"] and resumed["plan"] == straight["plan"]
    assert_same_weights(resumed, straight)

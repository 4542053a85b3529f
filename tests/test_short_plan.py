"""A time budget that buys few steps takes smaller ones: train.short_plan_steps (mt.training.stopping)."""

import pytest
import torch

from mt.checkpoint import load_checkpoint
from mt.config import TrainConfig
from mt.training.distributed import World
from mt.training.run_dir import RunState
from mt.training.stopping import StopFlag, StopPolicy
from tests.test_train import TickingClock, interrupt_after, run_train


def first_plan(capsys, **settings) -> tuple[RunState, str]:
    """The plan of a 10-minute budget at the end of a 30-step warm-up: 1 s a step, 40 s gone, an
    evaluation of 10 s every 50 steps (488 steps at the recipe's step size)."""
    tc = TrainConfig(max_minutes=10, max_steps=100_000, warmup_steps=30, eval_every=50, **settings)
    state = RunState()
    policy = StopPolicy(tc, World(), torch.device("cpu"), StopFlag(), state)
    assert policy.after_step(30, 30.0, 1.0) is None
    assert policy.after_evaluation(30, 0, 40.0, 10.0) is None
    return state, capsys.readouterr().err


def test_a_plan_shorter_than_short_plan_steps_halves_the_micro_batches_and_plans_at_half_the_pace(capsys):
    state, err = first_plan(capsys, grad_accum=4, short_plan_steps=600)
    # 550 s left at half a second a step and 10 s every 50 steps
    assert state.grad_accum == 2 and state.planned_steps == 30 + int(550 / 0.7) == 815
    assert "plans 488 steps of 4 micro-batches, under train.short_plan_steps (600), so steps of 2 from here: 815" in err


@pytest.mark.parametrize(
    "settings",
    [
        {"grad_accum": 4, "short_plan_steps": 488},  # the plan is long enough
        {"grad_accum": 4},  # off: the default
        {"grad_accum": 1, "short_plan_steps": 600},  # one micro-batch a step cannot be halved
    ],
)
def test_other_plans_keep_the_recipes_steps(capsys, settings):
    state, err = first_plan(capsys, **settings)
    assert state.grad_accum is None and state.planned_steps == 488
    assert "plans 488 steps\n" in err and "micro-batches" not in err


def test_a_remade_plan_or_a_budget_spent_before_the_plan_never_halves(capsys):
    """Only the first plan, made from warm-up's pace, may halve; the checks that make a plan again
    follow the steps as they are, and a budget spent during warm-up has no pace to plan from."""
    tc = TrainConfig(max_minutes=10, max_steps=100_000, warmup_steps=30, eval_every=50, grad_accum=4)
    tc.short_plan_steps = 100_000
    state = RunState()
    policy = StopPolicy(tc, World(), torch.device("cpu"), StopFlag(), state)
    policy.after_step(30, 30.0, 1.0)
    policy.after_evaluation(30, 0, 40.0, 10.0)
    assert state.grad_accum == 2
    policy.after_step(100, 300.0, 1.0)
    policy.after_evaluation(100, 0, 310.0, 10.0)  # 3.7 s a step since the plan: made again
    assert "so at step 100 it plans" in capsys.readouterr().err and state.grad_accum == 2
    spent = RunState()
    policy = StopPolicy(tc, World(), torch.device("cpu"), StopFlag(), spent)
    assert policy.after_step(10, 601.0, 1.0) == "out of time"
    assert spent.grad_accum is None and spent.planned_steps == 10


def test_short_plan_steps_must_be_positive(toy_text_corpus, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        run_train(tmp_path / "run", "train.short_plan_steps=0")
    assert stop.value.code == 2
    assert "train.short_plan_steps must be positive or null (off), got 0" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def micro_batches_per_step(monkeypatch) -> list[int]:
    """How many micro-batches each training step takes, as the trainer takes them."""
    from mt.training.trainer import Trainer

    counts, step = [], Trainer.train_step

    def counting(self, batches, seed=None):
        taken = 0

        def tap():
            nonlocal taken
            while True:
                taken += 1
                yield next(batches)

        result = step(self, tap(), seed)
        counts.append(taken)
        return result

    monkeypatch.setattr(Trainer, "train_step", counting)
    return counts


def test_a_short_plan_takes_half_the_micro_batches_from_the_plan_on_and_resumes_exactly(
    toy_text_corpus, tmp_path, monkeypatch, capsys
):
    """Warm-up's steps take the recipe's four micro-batches, every step after the plan two; the
    halving is saved with the plan, and a run interrupted after it and resumed ends with the
    weights of the run that was not."""
    budget = ["train.max_minutes=0.05", "train.max_steps=100000", "train.eval_every=5"]
    budget += ["train.grad_accum=4", "train.short_plan_steps=100000", "train.warmup_steps=4"]
    counts = micro_batches_per_step(monkeypatch)
    straight = run_budgeted(tmp_path / "straight", budget, monkeypatch)
    assert "micro-batches, under train.short_plan_steps (100000), so steps of 2 from here" in capsys.readouterr().err
    assert straight["grad_accum"] == 2 and straight["step"] == straight["planned_steps"] == len(counts) > 8
    assert counts == [4] * 4 + [2] * (len(counts) - 4)
    interrupted, resumed = interrupt_and_resume(tmp_path / "resumed", budget, monkeypatch, 4 * 4 + 2 * 2, counts)
    assert interrupted["grad_accum"] == 2 and 4 < interrupted["step"] < straight["step"]  # 3 steps after the plan
    assert set(counts) == {2}
    assert resumed["step"] == straight["step"] and resumed["grad_accum"] == 2
    assert_same_weights(resumed, straight)


def run_budgeted(run_dir, budget: list[str], monkeypatch) -> dict:
    """A run whose time budget follows a clock that ticks with each reading; its last.pt."""
    from mt.training import trainer

    monkeypatch.setattr(trainer, "time", TickingClock(0.01))
    run_train(run_dir, *budget)
    return load_checkpoint(run_dir / "last.pt")


def interrupt_and_resume(run_dir, budget: list[str], monkeypatch, after_batches: int, seen: list) -> tuple[dict, dict]:
    """A budgeted run stopped by Ctrl-C after `after_batches` batches, then resumed to its end: its
    last.pt at the stop and at the end. `seen`, what a test watches at each step, is emptied before
    the resume."""
    from mt.training import trainer

    monkeypatch.setattr(trainer, "time", TickingClock(0.01))
    with monkeypatch.context() as m:
        interrupt_after(m, after_batches)
        with pytest.raises(SystemExit):
            run_train(run_dir, *budget)
    interrupted = load_checkpoint(run_dir / "last.pt")
    seen.clear()
    run_train(run_dir, *budget, "--resume")
    return interrupted, load_checkpoint(run_dir / "last.pt")


def assert_same_weights(a: dict, b: dict) -> None:
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name

"""A time budget that buys many steps trains with dropout: train.long_plan_steps (mt.training.stopping)."""

import pytest
import torch

from mt.config import TrainConfig
from mt.dropout import Dropout
from mt.model import Attention, set_dropout
from mt.training.distributed import World
from mt.training.run_dir import RunState
from mt.training.stopping import StopFlag, StopPolicy
from tests.test_short_plan import assert_same_weights, first_plan, interrupt_and_resume, run_budgeted
from tests.test_train import run_train


def test_a_plan_of_at_least_long_plan_steps_turns_its_dropout_on_and_says_so(capsys):
    state, err = first_plan(capsys, long_plan_steps=488, long_plan_dropout=0.15)
    assert state.dropout == 0.15 and state.planned_steps == 488  # the steps are planned as they were
    assert "plans 488 steps, at least train.long_plan_steps (488), so dropout 0.15 from here" in err


@pytest.mark.parametrize("settings", [{"long_plan_steps": 489}, {}])  # too short a plan; off (the default)
def test_other_plans_keep_the_recipes_dropout(capsys, settings):
    state, err = first_plan(capsys, **settings)
    assert state.dropout is None and state.planned_steps == 488
    assert "plans 488 steps\n" in err and "dropout" not in err


def test_a_remade_plan_or_a_budget_spent_before_the_plan_never_turns_dropout_on(capsys):
    """Only the first plan decides; a plan made again when the pace changed keeps what it found,
    and a budget spent during warm-up has no steps left to plan."""
    tc = TrainConfig(max_minutes=10, max_steps=100_000, warmup_steps=30, eval_every=50, long_plan_steps=1000)
    state = RunState()
    policy = StopPolicy(tc, World(), torch.device("cpu"), StopFlag(), state)
    policy.after_step(30, 30.0, 0.1)
    policy.after_evaluation(30, 0, 40.0, 10.0)  # 0.3 s a step with evaluations: 1,863 steps
    assert state.dropout == 0.1
    policy.after_step(100, 300.0, 1.0)
    policy.after_evaluation(100, 0, 310.0, 10.0)  # 3.7 s a step since the plan: made again, shorter
    assert "so at step 100 it plans" in capsys.readouterr().err and state.dropout == 0.1
    quick = RunState()
    policy = StopPolicy(tc, World(), torch.device("cpu"), StopFlag(), quick)
    policy.after_step(30, 30.0, 5.0)
    policy.after_evaluation(30, 0, 40.0, 10.0)  # 5 s a step: 135 steps, too short for dropout
    policy.after_step(100, 60.0, 0.01)
    policy.after_evaluation(100, 0, 70.0, 1.0)  # much faster since: a longer plan, still no dropout
    assert quick.planned_steps > 1000 and quick.dropout is None
    spent = RunState()
    policy = StopPolicy(tc, World(), torch.device("cpu"), StopFlag(), spent)
    assert policy.after_step(2000, 601.0, 0.1) == "out of time"
    assert spent.dropout is None and spent.planned_steps == 2000


@pytest.mark.parametrize("setting", ["train.long_plan_steps=0", "train.long_plan_dropout=1.0"])
def test_bad_long_plan_settings_are_one_line(toy_text_corpus, tmp_path, capsys, setting):
    with pytest.raises(SystemExit) as stop:
        run_train(tmp_path / "run", setting)
    assert stop.value.code == 2
    key, value = setting.split("=")
    says = "must be positive or null (off), got 0" if value == "0" else "must be in [0, 1), got 1.0"
    assert f"{key} {says}" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_set_dropout_reaches_every_dropout_and_the_attention_weights_unless_told_not_to():
    model = torch.nn.Sequential(Attention(8, 2, 0.0, True), Dropout(0.0), Attention(8, 2, 0.0, True, 0.3))
    set_dropout(model, 0.2, attention=False)
    assert [m.resid_dropout.p for m in (model[0], model[2])] == [0.2, 0.2] and model[1].p == 0.2
    assert [model[0].dropout, model[2].dropout] == [0.0, 0.3]
    set_dropout(model, 0.25)
    assert [model[0].dropout, model[2].dropout, model[1].p] == [0.25, 0.25, 0.25]


def dropout_per_step(monkeypatch) -> list[float]:
    """The dropout of the model's sublayer outputs at each training step, as the trainer takes it."""
    from mt.training.trainer import Trainer

    seen, step = [], Trainer.train_step

    def watching(self, batches, seed=None):
        seen.append({m.p for m in self.model.modules() if isinstance(m, Dropout)})
        return step(self, batches, seed)

    monkeypatch.setattr(Trainer, "train_step", watching)
    return seen


def test_a_long_plan_trains_with_dropout_from_the_plan_on_and_resumes_exactly(
    toy_text_corpus, tmp_path, monkeypatch, capsys
):
    """Warm-up's steps train without dropout, every step after the plan with it; the switch is
    saved with the plan, and a run interrupted after it and resumed ends with the weights of the
    run that was not."""
    budget = ["train.max_minutes=0.05", "train.max_steps=100000", "train.eval_every=5", "train.warmup_steps=4"]
    budget += ["model.dropout=0.0", "train.long_plan_steps=1", "train.long_plan_dropout=0.2"]
    seen = dropout_per_step(monkeypatch)
    straight = run_budgeted(tmp_path / "straight", budget, monkeypatch)
    assert "at least train.long_plan_steps (1), so dropout 0.2 from here" in capsys.readouterr().err
    assert straight["dropout"] == 0.2 and straight["step"] == straight["planned_steps"] == len(seen) > 8
    assert seen == [{0.0}] * 4 + [{0.2}] * (len(seen) - 4)
    interrupted, resumed = interrupt_and_resume(tmp_path / "resumed", budget, monkeypatch, 7, seen)
    assert interrupted["dropout"] == 0.2 and 4 < interrupted["step"] < straight["step"]  # the third step after the plan
    assert seen and all(p == {0.2} for p in seen)
    assert resumed["step"] == straight["step"] and resumed["dropout"] == 0.2
    assert_same_weights(resumed, straight)

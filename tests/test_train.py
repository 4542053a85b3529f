"""The training command: resume is exact, budgets and Ctrl-C checkpoint, the run directory is complete."""

import json
import os
import signal
import subprocess
import sys

import pytest
import torch

from mt import train as train_module
from mt.checkpoint import load_checkpoint
from mt.training.lm_task import LanguageModelTask

TINY = [
    "model.n_layer=1",
    "model.n_head=2",
    "model.d_model=16",
    "model.dropout=0.1",
    "data.block_size=16",
    "train.batch_size=4",
    "train.max_steps=12",
    "train.eval_every=4",
    "train.eval_batches=2",
    "train.warmup_steps=2",
    "train.device=cpu",
    "train.log_every=1",
    "train.max_minutes=null",  # a time budget makes the schedule follow the clock; these tests compare runs exactly
]
RECIPE = "recipes/shakespeare_char.yaml"


def run_train(out_dir, *extra):
    train_module.main([RECIPE, *TINY, f"out_dir={out_dir}", *extra])


def interrupt_after(monkeypatch, n_batches, task_class=LanguageModelTask):
    """Deliver a real SIGINT while the training loop fetches batch n_batches + 1."""
    original = task_class.train_batches

    def batches(self):
        for i, batch in enumerate(original(self)):
            if i == n_batches:
                os.kill(os.getpid(), signal.SIGINT)
            yield batch

    monkeypatch.setattr(task_class, "train_batches", batches)


def test_resume_ends_where_an_uninterrupted_run_does(toy_text_corpus, tmp_path, monkeypatch):
    run_train(tmp_path / "straight")
    with monkeypatch.context() as m:
        interrupt_after(m, 5)
        with pytest.raises(SystemExit) as stop:
            run_train(tmp_path / "resumed")
    assert stop.value.code == 130
    half = load_checkpoint(tmp_path / "resumed" / "last.pt")
    assert 0 < half["step"] < 12
    train_module.main([RECIPE, "--resume", *TINY, f"out_dir={tmp_path / 'resumed'}"])  # a flag amid the overrides
    a = load_checkpoint(tmp_path / "straight" / "last.pt")
    b = load_checkpoint(tmp_path / "resumed" / "last.pt")
    assert a["step"] == b["step"] == 12
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


SUBWORD_SAMPLING = [
    "tokenizer.kind=sentencepiece",
    "tokenizer.vocab_size=30",
    "tokenizer.sampling_alpha=0.5",
    "data.max_len=12",
]


@pytest.mark.parametrize("tokens", [["tokenizer.kind=char"], SUBWORD_SAMPLING], ids=["char", "subword sampling"])
def test_translation_resume_continues_the_same_epoch(tmp_path, monkeypatch, tokens):
    """Interrupted mid-epoch, a resumed translation run reaches the uninterrupted run's weights,
    with subword sampling too (each batch's segmentation is seeded by its position)."""
    from mt.training.translation_task import TranslationTask

    fr = [f"le chat {i} dort" for i in range(60)]
    en = [f"the cat {i} sleeps" for i in range(60)]
    (tmp_path / "c.fr").write_text("\n".join(fr) + "\n")
    (tmp_path / "c.en").write_text("\n".join(en) + "\n")
    spec = f"{{path: text, data_files: {{fr: {tmp_path / 'c.fr'}, en: {tmp_path / 'c.en'}}}}}"
    args = [
        "recipes/fr_en.yaml",
        f"data.train=[{spec}]",
        f"data.valid={spec}",
        "model.enc_layers=1",
        "model.dec_layers=1",
        "model.d_model=16",
        "model.n_head=2",
        "model.d_ff=32",
        "model.dropout=0.1",
        *tokens,
        "data.max_tokens=120",
        "train.max_steps=14",
        "train.eval_every=7",
        "train.warmup_steps=2",
        "train.device=cpu",
        "train.max_minutes=null",
        "train.report=false",
    ]
    train_module.main([*args, f"out_dir={tmp_path / 'straight'}"])
    with monkeypatch.context() as m:
        interrupt_after(m, 4, TranslationTask)  # 60 pairs in ~4-pair batches: well inside the first epoch
        with pytest.raises(SystemExit):
            train_module.main([*args, f"out_dir={tmp_path / 'resumed'}"])
    assert load_checkpoint(tmp_path / "resumed" / "last.pt")["task"]["batch_in_epoch"] > 0
    train_module.main([*args, f"out_dir={tmp_path / 'resumed'}", "--resume"])
    a = load_checkpoint(tmp_path / "straight" / "last.pt")
    b = load_checkpoint(tmp_path / "resumed" / "last.pt")
    assert a["task"] == b["task"] and a["step"] == b["step"] == 14
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


def test_run_directory_contents_and_metrics(toy_text_corpus, tmp_path):
    run_train(tmp_path / "run")
    names = sorted(p.name for p in (tmp_path / "run").iterdir() if not p.name.startswith("."))  # .lock aside
    assert names == ["best.pt", "config.yaml", "last.pt", "metrics.jsonl", "tokenizer.json"]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [4, 8, 12]
    for r in rows:
        assert set(r) == {"step", "train_loss", "val_loss", "lr", "tokens_per_s", "elapsed_s"}
    best = load_checkpoint(tmp_path / "run" / "best.pt")
    assert best["val_loss"] == min(r["val_loss"] for r in rows)
    assert "optimizer" not in best  # best holds weights only


def test_wall_clock_budget_stops_evaluates_and_checkpoints(toy_text_corpus, tmp_path):
    run_train(tmp_path / "run", "train.max_minutes=0.00001", "train.max_steps=1000")
    state = load_checkpoint(tmp_path / "run" / "last.pt")
    assert state["step"] == 1
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 1


def test_existing_run_is_never_overwritten(toy_text_corpus, tmp_path, capsys):
    run_train(tmp_path / "run")
    before = (tmp_path / "run" / "last.pt").read_bytes()
    with pytest.raises(SystemExit) as e:
        run_train(tmp_path / "run")
    assert e.value.code == 2
    assert "--resume" in capsys.readouterr().err
    assert (tmp_path / "run" / "last.pt").read_bytes() == before


def test_resume_refuses_a_changed_model(toy_text_corpus, tmp_path, capsys):
    run_train(tmp_path / "run")
    with pytest.raises(SystemExit):
        run_train(tmp_path / "run", "model.d_model=32", "--resume")
    assert "model.d_model was 16" in capsys.readouterr().err


def test_a_language_model_trains_without_loading_datasets(toy_text_corpus, tmp_path):
    """`datasets` takes about a second to import and only translation reads corpora through it, so a
    char GPT's run, and each resume of one, starts without it."""
    probe = "import sys\nfrom mt import train\ntrain.main(sys.argv[1:])\nprint('datasets:', 'datasets' in sys.modules)"
    command = [sys.executable, "-c", probe, RECIPE, *TINY, "train.max_steps=4", f"out_dir={tmp_path / 'run'}"]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "run" / "last.pt").is_file()
    assert "datasets: False" in result.stdout


def test_shakespeare_recipe_end_to_end_through_the_cli(mirror, tmp_path):
    """The shipped recipe with tiny overrides: trains on CPU, checkpoints, then generates."""
    env = {**os.environ, "MT_DATA_MIRROR": str(mirror), "MT_DATA_DIR": str(tmp_path / "data")}
    out = tmp_path / "run"
    train = subprocess.run(
        [
            sys.executable,
            "-m",
            "mt.train",
            RECIPE,
            *TINY,
            "train.max_steps=30",
            "train.eval_every=15",
            f"out_dir={out}",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert train.returncode == 0, train.stderr
    assert "step 30:" in train.stderr and "val_loss" in train.stderr
    assert (out / "best.pt").is_file() and (tmp_path / "data" / "tinyshakespeare" / "input.txt").is_file()
    gen = subprocess.run(
        [sys.executable, "-m", "mt.generate", "--model", str(out), "--prompt", "ROMEO:", "--max-new-tokens", "40"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert gen.returncode == 0, gen.stderr
    assert gen.stdout.startswith("ROMEO:") and len(gen.stdout) >= len("ROMEO:") + 40


def test_snapshots_are_averaged_when_training_stops(toy_text_corpus, tmp_path, capsys):
    run_train(tmp_path / "run", "train.average_last=2")
    snaps = sorted(p.name for p in (tmp_path / "run" / "snapshots").iterdir())
    assert snaps == ["step-00000008.pt", "step-00000012.pt"]  # only the last two are kept
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["averaged_from"] == [8, 12] and "val_loss" in rows[-1]
    best = load_checkpoint(tmp_path / "run" / "best.pt")
    a, b = (load_checkpoint(tmp_path / "run" / "snapshots" / n)["model"] for n in snaps)
    averaged = {k: (a[k] + b[k]) / 2 for k in a}
    if rows[-1]["best"]:  # the average became best.pt only because it validated better
        assert best["averaged_from"] == [8, 12]
        assert all(torch.allclose(best["model"][k], averaged[k], atol=1e-7) for k in a)
    else:
        assert "averaged_from" not in best
    assert "python -m mt.generate --model" in capsys.readouterr().err


def test_progress_bar_total_follows_the_time_budget():
    from mt.training.stopping import expected_last_step

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
    from mt.config import TrainConfig
    from mt.training.distributed import World
    from mt.training.run_dir import RunState
    from mt.training.stopping import StopFlag, StopPolicy

    tc = TrainConfig(max_minutes=10, max_steps=100_000, warmup_steps=30, eval_every=50)
    state = RunState()
    policy = StopPolicy(tc, World(), torch.device("cpu"), StopFlag(), state)
    assert policy.after_step(29, 29.0, 1.0) is None and not policy.evaluation_due(29)
    assert policy.after_step(30, 30.0, 1.0) is None and state.planned_steps is None
    assert policy.evaluation_due(30)  # not a multiple of eval_every: the evaluation the plan times
    # 40 s after the evaluation of 10 s: 600 - 40 - 10 (the last one) = 550 s left, 1 + 10/50 s a step
    assert policy.after_evaluation(30, 0, 40.0, 10.0) is None
    assert state.planned_steps == 30 + int(550 / 1.2) and not policy.evaluation_due(31)
    assert "10.0 s an evaluation every 50 steps plans 488 steps" in capsys.readouterr().err
    steps_at_a_step_a_second = 30 + (600 - 40)  # what the plan was before evaluations counted
    assert state.planned_steps < steps_at_a_step_a_second
    assert policy.after_step(487, 625.0, 1.0) is None  # a plan's usual seconds over its budget: not cut short
    assert policy.after_step(488, 626.0, 1.0) == "out of time"


def test_a_run_that_slows_after_its_plan_stops_at_the_budgets_limit(capsys):
    """The plan assumes warm-up's pace; where the machine slows later, the run still stops 5% (at
    least 30 s) past train.max_minutes, and the plan saved with it says it is finished."""
    from mt.config import TrainConfig
    from mt.training.distributed import World
    from mt.training.run_dir import RunState
    from mt.training.stopping import StopFlag, StopPolicy

    tc = TrainConfig(max_minutes=10, max_steps=100_000, warmup_steps=30, eval_every=50)
    state = RunState()
    policy = StopPolicy(tc, World(), torch.device("cpu"), StopFlag(), state)
    policy.after_step(30, 30.0, 1.0)
    policy.after_evaluation(30, 0, 40.0, 10.0)
    assert state.planned_steps == 488
    assert policy.after_step(300, 629.9, 2.0) is None  # twice as slow since the plan: 630 s is the limit
    assert policy.after_step(301, 630.0, 2.0) == "out of time" and state.planned_steps == 301
    assert "10.5 min of training reached at step 301 of the 488 planned" in policy.message("out of time")
    resumed = StopPolicy(tc, World(), torch.device("cpu"), StopFlag(), state)
    assert resumed.steps_done(301) == "out of time"
    short = StopPolicy(TrainConfig(max_minutes=1), World(), torch.device("cpu"), StopFlag(), RunState())
    assert short.limit_s == 90.0  # a short budget gets 30 s, not 3


def test_the_budgets_limit_stops_a_real_run_that_slowed_and_resume_finds_it_finished(
    toy_text_corpus, tmp_path, monkeypatch, capsys
):
    from mt.training import trainer
    from mt.training.stopping import StopPolicy

    clock = TickingClock(0.02)
    monkeypatch.setattr(trainer, "time", clock)
    plan = StopPolicy._plan

    def plan_then_slow_down(self, *args):
        plan(self, *args)
        clock.tick = 1.0  # from here on the machine is far slower than warm-up said

    monkeypatch.setattr(StopPolicy, "_plan", plan_then_slow_down)
    # no check before the limit (no evaluation, no logged step): it would make the plan again first
    budget = ["train.max_minutes=0.05", "train.max_steps=100000", "train.eval_every=1000", "train.log_every=1000"]
    run_train(tmp_path / "run", *budget)
    err = capsys.readouterr().err
    planned = int(err.split(" plans ")[1].split()[0])
    ckpt = load_checkpoint(tmp_path / "run" / "last.pt")
    assert ckpt["planned_steps"] == ckpt["step"] < planned
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


def test_a_second_training_into_the_same_run_is_refused_until_the_first_ends(toy_text_corpus, tmp_path, capsys):
    import fcntl

    (tmp_path / "run").mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
            "fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)",
            str(tmp_path / "run" / ".lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(SystemExit) as e:
        run_train(tmp_path / "run")
    assert e.value.code == 2 and "another training is writing to" in capsys.readouterr().err
    assert not (tmp_path / "run" / "last.pt").exists()
    holder.kill()  # killed, not released: the operating system drops its lock
    holder.wait()
    run_train(tmp_path / "run")
    assert (tmp_path / "run" / "last.pt").is_file()
    with open(tmp_path / "run" / ".lock") as f:  # and the finished run released its own
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_plan_the_pace_since_has_proved_wrong_is_made_again_and_the_rate_does_not_jump(capsys):
    """Regular evaluations check the plan against the pace measured since it was made; 2% (30 s at
    least) off the budget, it is made again, and the cosine goes on from where it was."""
    from mt.config import TrainConfig
    from mt.training.distributed import World
    from mt.training.optim import lr_at
    from mt.training.run_dir import RunState
    from mt.training.stopping import StopFlag, StopPolicy

    tc = TrainConfig(max_minutes=100, max_steps=100_000, warmup_steps=30, eval_every=50, lr=1e-3, min_lr=1e-4)
    state = RunState()
    policy = StopPolicy(tc, World(), torch.device("cpu"), StopFlag(), state)
    policy.after_step(30, 30.0, 1.0)
    policy.after_evaluation(30, 0, 40.0, 10.0)
    first = 30 + int((6000 - 40 - 10) / 1.2)
    assert state.planned_steps == first
    # 20 steps at the plan's 1 s and an evaluation of 10 s: on course, kept
    assert policy.after_evaluation(50, 0, 40.0 + 20 + 10, 10.0) is None
    assert state.planned_steps == first and state.plan_anchor is None
    assert policy.after_evaluation(51, 0, 500.0, 10.0) is None and state.planned_steps == first  # not regular
    # 50 more at 1.5 s: 95 s over 70 steps since the plan, 1.357 s a step, would end far past 100 min
    lr_before = lr_at(100, tc, first)
    assert policy.after_evaluation(100, 0, 70.0 + 75 + 10, 10.0) is None
    replanned = 100 + int((6000 - 155 - 10) / (95 / 70 + 10 / 50))
    assert state.planned_steps == replanned < first
    assert f"the {first} steps planned would end at" in capsys.readouterr().err
    assert state.plan_anchor[0] == 100
    assert lr_at(100, tc, replanned, state.plan_anchor) == pytest.approx(lr_before)  # no jump
    assert lr_at(replanned, tc, replanned, state.plan_anchor) == pytest.approx(1e-4)  # and it still anneals
    rates = [lr_at(s, tc, replanned, state.plan_anchor) for s in range(100, replanned + 1, 50)]
    assert rates == sorted(rates, reverse=True)
    # a resumed run measures from its first regular evaluation, past the steps that allocate
    resumed = StopPolicy(tc, World(), torch.device("cpu"), StopFlag(), state)
    assert resumed.after_evaluation(150, 0, 5000.0, 10.0) is None and state.planned_steps == replanned


def test_after_the_last_evaluation_before_its_end_the_plan_is_checked_every_log_every_steps(capsys):
    """A short run has one or two evaluations, and none in its last part: from the last one before
    the plan's end, the logged steps check the plan, with the evaluations' mean time; earlier
    logged steps, unlogged steps, and a resumed run that has timed nothing yet do not."""
    from mt.config import TrainConfig
    from mt.training.distributed import World
    from mt.training.run_dir import RunState
    from mt.training.stopping import StopFlag, StopPolicy

    tc = TrainConfig(max_minutes=10, max_steps=100_000, warmup_steps=30, eval_every=200, log_every=10)
    state = RunState()
    policy = StopPolicy(tc, World(), torch.device("cpu"), StopFlag(), state)
    policy.after_step(30, 30.0, 1.0)
    policy.after_evaluation(30, 0, 40.0, 10.0)
    first = 30 + int((600 - 40 - 10) / (1.0 + 10 / 200))
    assert first == 553 and state.planned_steps == first
    assert policy.after_step(100, 80.0, 1.0) is None and state.planned_steps == first  # an evaluation is to come
    assert policy.after_evaluation(400, 0, 420.0, 10.0) is None and state.planned_steps == first  # 1 s a step
    # from here 0.3 s a step: the logged step 410 finds the plan on course, 425 is not logged, and at
    # 430 (379 s over 400 steps since the plan) the plan would end 38 s before the budget
    assert policy.after_step(410, 423.0, 1.0) is None and state.planned_steps == first
    assert policy.after_step(425, 427.5, 1.0) is None and state.planned_steps == first
    assert policy.after_step(430, 429.0, 1.0) is None
    assert state.planned_steps == 430 + int((600 - 429 - 10) / (379 / 400 + 10 / 200)) > first
    assert "so at step 430 it plans" in capsys.readouterr().err and state.plan_anchor[0] == 430
    resumed = StopPolicy(tc, World(), torch.device("cpu"), StopFlag(), RunState(planned_steps=first))
    assert resumed.after_step(430, 429.0, 1.0) is None and resumed.state.planned_steps == first


def test_a_run_that_slows_makes_its_plan_again_ends_in_its_budget_and_resumes_exactly(
    toy_text_corpus, tmp_path, monkeypatch, capsys
):
    """The first plan is made at warm-up's pace; the steps then run at another, so the evaluation
    after it makes the plan again. The run ends at the new plan, inside its budget, and a run
    interrupted after the new plan and resumed ends with the same weights."""
    from mt.training import trainer
    from mt.training.stopping import StopPolicy

    clock = TickingClock(2.0)
    monkeypatch.setattr(trainer, "time", clock)
    plan = StopPolicy._plan

    def plan_then_change_pace(self, *args, **kwargs):
        plan(self, *args, **kwargs)
        clock.tick = 2.5  # warm-up's second half is no guide to what follows

    monkeypatch.setattr(StopPolicy, "_plan", plan_then_change_pace)
    budget = ["train.max_minutes=30", "train.max_steps=100000", "train.eval_every=20"]
    run_train(tmp_path / "straight", *budget)
    err = capsys.readouterr().err
    first, again = (int(part.split()[0]) for part in err.split(" plans ")[1:3])
    assert again != first and "so at step 20 it plans" in err
    straight = load_checkpoint(tmp_path / "straight" / "last.pt")
    assert straight["step"] == straight["planned_steps"] == again and straight["plan_anchor"][0] == 20
    assert abs(straight["elapsed_s"] - 1800) < 36  # within 2% of the budget
    clock.tick = 2.0
    with monkeypatch.context() as m:
        interrupt_after(m, 30)
        with pytest.raises(SystemExit):
            run_train(tmp_path / "resumed", *budget)
    assert load_checkpoint(tmp_path / "resumed" / "last.pt")["planned_steps"] == again
    run_train(tmp_path / "resumed", *budget, "--resume")
    resumed = load_checkpoint(tmp_path / "resumed" / "last.pt")
    assert resumed["step"] == again and resumed["plan_anchor"] == straight["plan_anchor"]
    for name, tensor in resumed["model"].items():
        assert torch.equal(tensor, straight["model"][name]), name


def test_cosine_schedule_ends_at_the_planned_step():
    from mt.config import TrainConfig
    from mt.training.optim import lr_at

    tc = TrainConfig(lr=1e-3, min_lr=1e-4, warmup_steps=10, max_steps=1000)
    assert lr_at(4, tc, 190) == pytest.approx(5e-4)  # warmup goes by steps
    assert lr_at(10, tc) == pytest.approx(1e-3)
    assert lr_at(100, tc, 190) == pytest.approx(5.5e-4)  # half way to the plan: half way down the cosine
    assert lr_at(190, tc, 190) == pytest.approx(1e-4)
    assert lr_at(505, tc) == pytest.approx(5.5e-4)  # no plan: max_steps ends it


class TickingClock:
    """A stand-in for the trainer's clock that moves `tick` seconds each time it is read, so that a
    time budget plans the same steps on a fast machine and on a loaded one."""

    def __init__(self, tick: float):
        self.now, self.tick = 0.0, tick

    def monotonic(self) -> float:
        self.now += self.tick
        return self.now


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
    planned = interrupted["planned_steps"]
    assert planned is not None and interrupted["step"] < planned  # stopped after the plan and before its end
    assert "time budget: 0.05 min" in capsys.readouterr().err
    run_train(tmp_path / "budget", *budget, "--resume")
    run_train(tmp_path / "steps", f"train.max_steps={planned}", "train.eval_every=5")
    a, b = load_checkpoint(tmp_path / "budget" / "last.pt"), load_checkpoint(tmp_path / "steps" / "last.pt")
    assert a["step"] == b["step"] == planned
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


def test_language_model_trains_on_a_users_text_file(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MT_DATA_MIRROR", raising=False)
    text = tmp_path / "poems.txt"
    text.write_text("Roses are red, violets are blue; sugar is sweet, and so are you.\n" * 40, encoding="utf-8")
    run_train(tmp_path / "run", f"data.corpus={text}")
    assert load_checkpoint(tmp_path / "run" / "last.pt")["step"] == 12
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine line\n\xff\xfe broken\n")
    with pytest.raises(SystemExit):
        run_train(tmp_path / "bad_run", f"data.corpus={bad}")
    assert "bad.txt line 2: invalid UTF-8" in capsys.readouterr().err


def test_both_tasks_implement_the_task_protocol():
    import inspect

    from mt.training.task import Task
    from mt.training.translation_task import TranslationTask

    wanted = {name for name, _ in inspect.getmembers(Task) if not name.startswith("_")} | {
        "best_metric",
        "higher_is_better",
    }
    for task in (TranslationTask, LanguageModelTask):
        missing = {name for name in wanted if not hasattr(task, name)}
        assert not missing, (task.__name__, missing)
        for name in ("loss", "evaluate", "batch_tokens", "load_state_dict"):
            assert (
                list(inspect.signature(getattr(task, name)).parameters)[:2]
                == list(inspect.signature(getattr(Task, name)).parameters)[:2]
            ), (task.__name__, name)


def test_grad_accum_weighs_micro_batches_by_their_tokens(tmp_path):
    """Two micro-batches of 1 and 5 target tokens: the step's gradient is the mean over all 6
    tokens (as one batch of 6 would give), not the mean of the two micro-batch means."""
    import torch.nn.functional as F

    from mt.config import load_config
    from mt.training.distributed import World
    from mt.training.run_dir import RunState
    from mt.training.trainer import Trainer

    cfg = load_config(
        "recipes/fr_en.yaml",
        ["train.grad_accum=2", "train.grad_clip=0", "train.precision=fp32", "train.device=cpu", f"out_dir={tmp_path}"],
    )

    class Rows:  # a stand-in task: each row of x is one target token
        vocab_size = 3

        def batch_tokens(self, batch):
            return len(batch[1])

        def loss(self, model, batch, label_smoothing):
            return F.cross_entropy(model(batch[0]), batch[1])

    torch.manual_seed(0)
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    model = torch.nn.Linear(4, 3, bias=False)
    start = model.weight.detach().clone()
    trainer = Trainer(
        cfg, World(), torch.device("cpu"), Rows(), model, torch.optim.SGD(model.parameters(), lr=1.0), RunState()
    )
    loss, tokens, _ = trainer.train_step(iter([(x[:1], y[:1]), (x[1:], y[1:])]))
    reference = torch.nn.Linear(4, 3, bias=False)
    reference.weight.data.copy_(start)
    F.cross_entropy(reference(x), y).backward()
    assert tokens == 6
    assert torch.allclose(start - model.weight.detach(), reference.weight.grad, atol=1e-6)
    assert loss.item() == pytest.approx(F.cross_entropy(reference(x), y).item(), rel=1e-5)


def test_every_evaluation_runs_between_two_hand_backs_of_the_heap(toy_text_corpus, tmp_path, monkeypatch):
    """Training's kept heap goes back to the system before each evaluation and decoding's after it,
    so neither phase's freed blocks add to the other's peak (mt.heap.give_back)."""
    from mt.training import trainer

    calls = []
    monkeypatch.setattr(trainer.heap, "give_back", lambda: calls.append("give_back") or True)
    evaluate = LanguageModelTask.evaluate
    monkeypatch.setattr(LanguageModelTask, "evaluate", lambda *a: calls.append("evaluate") or evaluate(*a))
    run_train(tmp_path / "run", "train.report=false")
    assert calls == ["give_back", "evaluate", "give_back"] * 3  # evaluations at steps 4, 8 and 12

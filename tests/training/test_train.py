"""The training command: resume is exact, budgets and Ctrl-C checkpoint, the run directory is complete."""

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import LM_RECIPE as RECIPE
from helpers import TINY_LM as TINY
from helpers import interrupt_after, run_train

from mt import train as train_module
from mt.checkpoint import load_checkpoint
from mt.training.lm_task import LanguageModelTask


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
        "recipes/multi30k.yaml",
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
        "data.held_out=false",  # it validates on what it learns
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
    from mt.runtime import Runtime
    from mt.training.distributed import World
    from mt.training.run_dir import RunState
    from mt.training.trainer import Trainer

    cfg = load_config(
        "recipes/multi30k.yaml",
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
    runtime = Runtime(torch.device("cpu"))
    trainer = Trainer(cfg, World(), runtime, Rows(), model, torch.optim.SGD(model.parameters(), lr=1.0), RunState())
    loss, tokens, _ = trainer.train_step(iter([(x[:1], y[:1]), (x[1:], y[1:])]))
    reference = torch.nn.Linear(4, 3, bias=False)
    reference.weight.data.copy_(start)
    F.cross_entropy(reference(x), y).backward()
    assert tokens == 6
    assert torch.allclose(start - model.weight.detach(), reference.weight.grad, atol=1e-6)
    assert loss.item() == pytest.approx(F.cross_entropy(reference(x), y).item(), rel=1e-5)


def test_every_evaluation_runs_between_two_hand_backs_of_the_heap(toy_text_corpus, tmp_path, monkeypatch):
    """Training's kept heap goes back to the system before each evaluation and decoding's after it,
    so neither phase's freed blocks add to the other's peak (Runtime.give_back); and once more
    when training ends, before the report."""
    from mt.training import trainer

    calls = []
    monkeypatch.setattr(trainer.Runtime, "give_back", lambda self: calls.append("give_back"))
    evaluate = LanguageModelTask.evaluate
    monkeypatch.setattr(LanguageModelTask, "evaluate", lambda *a: calls.append("evaluate") or evaluate(*a))
    run_train(tmp_path / "run", "train.report=false")
    assert calls == ["give_back", "evaluate", "give_back"] * 3 + ["give_back"]  # evaluations at steps 4, 8, 12

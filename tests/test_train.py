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
from mt.lm import LanguageModelTask

TINY = [
    "model.n_layer=1", "model.n_head=2", "model.d_model=16", "model.dropout=0.1", "data.block_size=16",
    "train.batch_size=4", "train.max_steps=12", "train.eval_every=4", "train.eval_batches=2",
    "train.warmup_steps=2", "train.device=cpu", "train.log_every=1",
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
    run_train(tmp_path / "resumed", "--resume")
    a = load_checkpoint(tmp_path / "straight" / "last.pt")
    b = load_checkpoint(tmp_path / "resumed" / "last.pt")
    assert a["step"] == b["step"] == 12
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


def test_translation_resume_continues_the_same_epoch(tmp_path, monkeypatch):
    """Interrupted mid-epoch, a resumed translation run reaches the uninterrupted run's weights."""
    from mt.translation import TranslationTask

    fr = [f"le chat {i} dort" for i in range(60)]
    en = [f"the cat {i} sleeps" for i in range(60)]
    (tmp_path / "c.fr").write_text("\n".join(fr) + "\n")
    (tmp_path / "c.en").write_text("\n".join(en) + "\n")
    spec = f"{{path: text, data_files: {{fr: {tmp_path / 'c.fr'}, en: {tmp_path / 'c.en'}}}}}"
    args = ["recipes/fr_en.yaml", f"data.train=[{spec}]", f"data.valid={spec}", "model.enc_layers=1",
            "model.dec_layers=1", "model.d_model=16", "model.n_head=2", "model.d_ff=32", "model.dropout=0.1",
            "tokenizer.kind=char", "data.max_tokens=120", "train.max_steps=14", "train.eval_every=7",
            "train.warmup_steps=2", "train.device=cpu", "train.max_minutes=null"]
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
    names = sorted(p.name for p in (tmp_path / "run").iterdir())
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


def test_shakespeare_recipe_end_to_end_through_the_cli(mirror, tmp_path):
    """The shipped recipe with tiny overrides: trains on CPU, checkpoints, then generates."""
    env = {**os.environ, "MT_DATA_MIRROR": str(mirror), "MT_DATA_DIR": str(tmp_path / "data")}
    out = tmp_path / "run"
    train = subprocess.run(
        [sys.executable, "-m", "mt.train", RECIPE, *TINY, "train.max_steps=30", "train.eval_every=15", f"out_dir={out}"],
        capture_output=True, text=True, env=env,
    )
    assert train.returncode == 0, train.stderr
    assert "step 30:" in train.stderr and "val_loss" in train.stderr
    assert (out / "best.pt").is_file() and (tmp_path / "data" / "tinyshakespeare" / "input.txt").is_file()
    gen = subprocess.run(
        [sys.executable, "-m", "mt.generate", "--model", str(out), "--prompt", "ROMEO:", "--max-new-tokens", "40"],
        capture_output=True, text=True, env=env,
    )
    assert gen.returncode == 0, gen.stderr
    assert gen.stdout.startswith("ROMEO:") and len(gen.stdout) >= len("ROMEO:") + 40

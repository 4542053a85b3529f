"""Sampling from a trained language model through the real command."""

import subprocess
import sys

import pytest

from mt import train as train_module


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gen")
    data = tmp / "data" / "tinyshakespeare"
    data.mkdir(parents=True)
    data.joinpath("input.txt").write_text("To be, or not to be, that is the question.\n" * 40)
    mp = pytest.MonkeyPatch()
    mp.setenv("MT_DATA_DIR", str(tmp / "data"))
    mp.delenv("MT_DATA_MIRROR", raising=False)
    out = tmp / "run"
    train_module.main(
        [
            "recipes/shakespeare_char.yaml",
            "model.n_layer=1",
            "model.n_head=2",
            "model.d_model=16",
            "data.block_size=16",
            "train.batch_size=8",
            "train.max_steps=20",
            "train.eval_every=20",
            "train.eval_batches=2",
            "train.device=cpu",
            f"out_dir={out}",
        ]
    )
    mp.undo()
    return out


def generate(*args):
    return subprocess.run([sys.executable, "-m", "mt.generate", *args], capture_output=True, text=True)


def test_same_seed_same_text_and_other_seed_differs(trained_run):
    common = ["--model", str(trained_run), "--prompt", "To be", "--max-new-tokens", "60", "--temperature", "1.0"]
    a, b = generate(*common, "--seed", "3"), generate(*common, "--seed", "3")
    c = generate(*common, "--seed", "4")
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout
    assert a.stdout != c.stdout
    assert a.stdout.startswith("To be") and len(a.stdout.rstrip("\n")) == len("To be") + 60


def test_context_longer_than_block_size_is_cropped(trained_run):
    result = generate("--model", str(trained_run), "--prompt", "To be, or not to be, that is", "--max-new-tokens", "40")
    assert result.returncode == 0, result.stderr


def test_unknown_prompt_character_is_a_clear_error(trained_run):
    result = generate("--model", str(trained_run), "--prompt", "Zebra ☃")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: the prompt has characters the model never saw: 'Z☃'; remove them"
    ]


def test_missing_model_says_how_to_train(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = generate()
    assert result.returncode == 2
    assert "python -m mt.train recipes/shakespeare_char.yaml" in result.stderr
    assert "Traceback" not in result.stderr

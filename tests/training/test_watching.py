"""Watching training: TensorBoard event files and the curves picture, through the real commands."""

import json

import pytest
from helpers import cli


def test_plot_draws_the_curves_of_a_run(run_dir, tmp_path):
    pytest.importorskip(
        "matplotlib", reason="the plot extra is not installed (pip install 'mt[plot]'); .ci/run installs it"
    )
    out = tmp_path / "curves.png"
    result = cli("mt.plot", str(run_dir), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


@pytest.mark.parametrize(
    "content, words", [(None, "no metrics.jsonl"), ("", "no evaluations yet"), ("{oops\n", "damaged")]
)
def test_plot_says_what_is_wrong_with_a_run(tmp_path, content, words):
    if content is not None:
        (tmp_path / "metrics.jsonl").write_text(content)
    result = cli("mt.plot", str(tmp_path))
    assert result.returncode == 2 and words in result.stderr and result.stderr.count("\n") == 1


def test_tensorboard_logs_training_and_validation(toy_text_corpus, tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed (pip install 'mt[tensorboard]')")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    result = cli(
        "mt.train",
        "recipes/shakespeare_char.yaml",
        "train.device=cpu",
        "model.n_layer=1",
        "model.d_model=32",
        "model.n_head=2",
        "data.block_size=16",
        "train.max_steps=20",
        "train.eval_every=10",
        "train.log_every=5",
        "train.eval_batches=2",
        "train.tensorboard=true",
        f"out_dir={out}",
        env={"MT_DATA_DIR": str(toy_text_corpus.parent.parent)},
    )
    assert result.returncode == 0, result.stderr
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/lr", "train/tokens_per_s", "train/grad_norm", "valid/val_loss"} <= tags
    assert [e.step for e in events.Scalars("train/loss")] == [5, 10, 15, 20]
    assert [e.step for e in events.Scalars("valid/val_loss")] == [10, 20]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [e.value for e in events.Scalars("valid/val_loss")] == pytest.approx([r["val_loss"] for r in rows])

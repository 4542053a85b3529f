"""torchrun with DistributedDataParallel on CPU (gloo): two processes train like one with their global batch."""

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from mt.checkpoint import load_checkpoint
from mt.data.batching import shard, token_batches
from mt.inference.loading import load_run

COMMON = [
    "recipes/shakespeare_char.yaml",
    "model.n_layer=1",
    "model.n_head=2",
    "model.d_model=16",
    "model.dropout=0.0",
    "data.block_size=16",
    "train.max_steps=8",
    "train.eval_every=4",
    "train.eval_batches=4",
    "train.warmup_steps=2",
    "train.device=cpu",
    "train.log_every=2",
    "train.precision=fp32",  # bf16 rounding would swamp the summation-order differences compared here
]


def metrics(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def weights(run):
    return load_checkpoint(run / "last.pt")["model"]


def distance(a, b):
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.slow
def test_two_gloo_processes_match_one_process_with_the_same_global_batch(
    toy_text_corpus, tmp_path, own_temporary_folder
):
    rng = random.Random(0)  # varied text, so that different batches give different gradients
    toy_text_corpus.write_text("".join(rng.choice("abcdefgh ijklmn\nopqrstu") for _ in range(20_000)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for batch_size in (8, 4):
        one = subprocess.run(
            [
                sys.executable,
                "-m",
                "mt.train",
                *COMMON,
                f"train.batch_size={batch_size}",
                f"out_dir={tmp_path / f'one{batch_size}'}",
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        assert one.returncode == 0, one.stderr
    two = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "mt.train",
            *COMMON,
            "train.batch_size=4",
            f"out_dir={tmp_path / 'two'}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    assert "x 2 processes" in two.stderr
    assert any(p.name.startswith("torchelastic_") for p in own_temporary_folder.iterdir())  # not in /tmp itself
    a, b = metrics(tmp_path / "one8"), metrics(tmp_path / "two")
    # The cpu block's time budget evaluates once more at the end of warm-up, to time its plan.
    assert [r["step"] for r in a] == [r["step"] for r in b] == [2, 4, 8]
    for ra, rb in zip(a, b):
        for key in ("train_loss", "val_loss"):
            assert ra[key] == pytest.approx(rb[key], rel=2e-3), (key, ra, rb)
    # Only float summation order separates the runs; half the batch (one rank's share alone) is far off.
    same_batch = distance(weights(tmp_path / "two"), weights(tmp_path / "one8"))
    half_batch = distance(weights(tmp_path / "two"), weights(tmp_path / "one4"))
    assert same_batch < 0.1 * half_batch, (same_batch, half_batch)
    _, _, model = load_run(tmp_path / "two")  # a DDP run's checkpoint loads in a single process
    assert sum(p.numel() for p in model.parameters()) > 0


def test_sharded_epoch_covers_every_pair_once_with_equal_counts():
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(1, 40, 999), rng.integers(1, 40, 999)
    batches = token_batches(src, tgt, max_tokens=300, seed=3)
    for size in (2, 3, 4):
        shards = [shard(batches, rank, size) for rank in range(size)]
        assert len({len(s) for s in shards}) == 1
        seen = np.concatenate([b for s in shards for b in s])
        assert sorted(seen.tolist()) == list(range(999))

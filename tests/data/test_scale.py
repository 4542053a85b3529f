"""A corpus of 400,000 pairs loads, encodes and batches in bounded memory: the ids stay in
memory-mapped Arrow and the sampler holds only lengths.

Memory is measured from outside, over the training process and its encoding workers, as
proportional anonymous memory (Pss_Anon: heap, not the page cache of mapped files, and pages
that forked workers share are not counted twice). A loader that held every pair's ids as Python
lists took about 4.5 GB a million pairs, so 1.8 GB here, far over the bound; a fifth of the bound
is importing torch and datasets.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from helpers import process_children

PAIRS = 400_000
BOUND_MB = 1000

TRAIN_ONE_EPOCH = """
import json, sys
from pathlib import Path
import torch
from mt.config import load_config
from mt.training.translation_task import TranslationTask
parquet, work = sys.argv[1], Path(sys.argv[2])
cfg = load_config("recipes/multi30k.yaml", [
    f"data.train=[{{path: parquet, data_files: {parquet}, columns: {{fr: fr, en: en}}}}]",
    f"data.valid={{path: text, data_files: {{fr: {work}/valid.fr, en: {work}/valid.en}}}}",
    "data.max_tokens=16384", "data.num_proc=2", "tokenizer.vocab_size=2000", "tokenizer.max_pairs=20000",
    "data.held_out=false",
    f"out_dir={work}/run"])
(work / "run").mkdir()
from mt.runtime import Runtime
task = TranslationTask(cfg, Runtime(torch.device("cpu")), tokenizer_from=None)
pairs, tokens, batches = 0, 0, task.train_batches()
while True:
    batch = next(batches)
    if task.epoch == 1:
        break
    pairs, tokens = pairs + batch["src"].shape[0], tokens + batch["n_tokens"]
print(json.dumps({"kept": len(task.train), "kept_tokens": int(task.train.tgt_lens.sum()) + len(task.train),
                  "pairs": pairs, "tokens": tokens}))
"""


def write_synthetic_corpus(path: Path, n: int) -> None:
    """n sentence pairs of 3-29 made-up words; the English side is a word-for-word cipher of the
    French one, reversed. Built with Arrow kernels: a few seconds for a million pairs."""
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = pa.array(["".join(rng.choice(letters, rng.integers(2, 9))) for _ in range(3000)])
    lengths = rng.integers(3, 30, n)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    words = rng.integers(0, len(vocab), int(lengths.sum()))
    fr = pc.binary_join(pa.ListArray.from_arrays(offsets, vocab.take(words)), " ")
    en = pc.binary_join(pa.ListArray.from_arrays(offsets, vocab.take((words * 7 + 1) % len(vocab))), " ")
    pq.write_table(pa.table({"fr": fr, "en": en}), path, row_group_size=100_000)


def proportional_anon_mb(root: int) -> int:
    """Pss_Anon of a process and all its descendants, in MB."""
    children = process_children()
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss_Anon:"):
                    total += int(line.split()[1])
        except OSError:
            continue  # it exited between the listing and the read
    return total // 1024


@pytest.mark.slow
def test_a_large_corpus_loads_and_batches_in_bounded_memory(tmp_path):
    if not Path("/proc/self/smaps_rollup").exists():
        pytest.skip("needs Linux /proc/<pid>/smaps_rollup to measure proportional memory")
    write_synthetic_corpus(tmp_path / "pairs.parquet", PAIRS)
    (tmp_path / "valid.fr").write_text("un deux trois\n" * 20)
    (tmp_path / "valid.en").write_text("one two three\n" * 20)
    env = dict(
        os.environ,
        HF_HOME=str(tmp_path / "hf"),
        HF_DATASETS_CACHE=str(tmp_path / "hf" / "datasets"),
        MT_DATA_DIR=str(tmp_path / "data"),
    )
    child = subprocess.Popen(
        [sys.executable, "-c", TRAIN_ONE_EPOCH, str(tmp_path / "pairs.parquet"), str(tmp_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    peak = 0
    while child.poll() is None:
        peak = max(peak, proportional_anon_mb(child.pid))
        time.sleep(0.05)
    out, err = child.communicate()
    assert child.returncode == 0, err[-2000:]
    result = json.loads(out.strip().splitlines()[-1])
    print(f"\n{PAIRS:,} pairs, {result['kept']:,} kept: peak proportional anonymous memory {peak} MB")
    assert result["kept"] > 0.99 * PAIRS
    assert (result["pairs"], result["tokens"]) == (result["kept"], result["kept_tokens"])  # an epoch: each pair once
    assert 0 < peak < BOUND_MB

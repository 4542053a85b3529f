"""Training corpora mixed by weight, through the real loader: each epoch holds every corpus' share,
drawn without replacement inside a corpus and cycled, the same for the same seed and epoch."""

from collections import Counter

import numpy as np
import pytest
import torch

from mt.config import load_config
from mt.errors import UserError
from mt.runtime import Runtime
from mt.training.translation_task import TranslationTask


def corpus(folder, name, n):
    (folder / f"{name}.fr").write_text("".join(f"{name} {i} fr\n" for i in range(n)))
    (folder / f"{name}.en").write_text("".join(f"{name} {i} en\n" for i in range(n)))
    return f"{{path: text, data_files: {{fr: {folder / name}.fr, en: {folder / name}.en}}"


def task(tmp_path, train: str, seed: int = 1) -> TranslationTask:
    out = tmp_path / f"run{seed}"
    out.mkdir(exist_ok=True)
    overrides = ["tokenizer.kind=char", f"data.train={train}", f"data.valid={corpus(tmp_path, 'v', 5)}}}"]
    overrides.append("data.held_out=false")  # the recipe's test sets are not this test's
    cfg = load_config("recipes/multi30k.yaml", [*overrides, f"seed={seed}", "train.device=cpu", f"out_dir={out}"])
    return TranslationTask(cfg, Runtime(torch.device("cpu")), tokenizer_from=None)


def sources(t: TranslationTask, epoch: int) -> list[str]:
    rows = np.concatenate(t.epoch_batches(epoch))
    return t.train.texts(rows, "src")


def test_each_corpus_gives_its_weights_share_and_cycles(tmp_path):
    big, small = corpus(tmp_path, "big", 300), corpus(tmp_path, "small", 60)
    t = task(tmp_path, f"[{big}, weight: 1}}, {small}, weight: 3}}]")
    epochs = [sources(t, e) for e in range(4)]
    for drawn in epochs:
        counts = Counter(s.split()[0] for s in drawn)
        assert counts == {"big": 90, "small": 270}  # 360 pairs an epoch, a quarter and three quarters
        per_pair = Counter(s for s in drawn if s.startswith("small"))
        assert set(per_pair.values()) <= {4, 5}  # the small corpus cycles 4.5 times an epoch
    big_drawn = [[s for s in drawn if s.startswith("big")] for drawn in epochs]
    assert len(set(sum(big_drawn[:3], []))) == 270  # without replacement: no pair twice in one pass
    assert set(Counter(sum(big_drawn, [])).values()) == {1, 2} and len(set(sum(big_drawn, []))) == 300
    assert sources(task(tmp_path, f"[{big}, weight: 1}}, {small}, weight: 3}}]"), 2) == epochs[2]
    assert sources(task(tmp_path, f"[{big}, weight: 1}}, {small}, weight: 3}}]", seed=2), 2) != epochs[2]


def test_weights_and_repeats_do_not_mix(tmp_path):
    big, small = corpus(tmp_path, "big", 30), corpus(tmp_path, "small", 6)
    with pytest.raises(UserError, match="give every training corpus a weight, or none"):
        task(tmp_path, f"[{big}, weight: 1}}, {small}}}]")
    with pytest.raises(UserError, match="both weight and repeat"):
        task(tmp_path, f"[{big}, weight: 1, repeat: 2}}, {small}, weight: 1}}]")
    with pytest.raises(UserError, match="weight must be a positive number"):
        task(tmp_path, f"[{big}, weight: 0}}, {small}, weight: 1}}]")


def test_the_tokenizer_sample_follows_the_weights(tmp_path):
    import datasets

    from mt.data.corpora import sample_texts

    train = datasets.Dataset.from_dict(
        {"src": [f"big {i}" for i in range(300)] + [f"small {i}" for i in range(60)], "tgt": ["x"] * 360}
    )
    drawn = list(sample_texts(train, 80, seed=1, mix=([300, 60], [3, 1])))[:80]  # the sources come first
    assert Counter(s.split()[0] for s in drawn) == {"big": 60, "small": 20} and len(set(drawn)) == 80
    capped = list(sample_texts(train, 200, seed=1, mix=([300, 60], [1, 3])))
    assert Counter(s.split()[0] for s in capped[: len(capped) // 2]) == {"big": 50, "small": 60}  # all 60 it has

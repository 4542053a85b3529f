"""Fine-tuning (train.init_from): a run starts from another run's weights and tokenizer, takes its
model and tokenizer sections, refuses keys that disagree, and learns the new data."""

import random
import statistics

import pytest
import yaml
from helpers import TINY_MODEL, cli

from mt import train as train_module
from mt.config import config_from_dict, load_config
from mt.errors import UserError
from mt.inference.translator import Translator


def held_out_loss(run, sources, targets) -> float:
    """Mean negative log-probability per target token of held-out pairs under a run's model."""
    scored = Translator.load(run).score(sources, targets)
    return -sum(total for total, _ in scored) / sum(count for _, count in scored)


def write_pairs(folder, name, pairs):
    (folder / f"{name}.fr").write_text("".join(fr + "\n" for fr, _ in pairs))
    (folder / f"{name}.en").write_text("".join(en + "\n" for _, en in pairs))
    return f"{{path: text, data_files: {{fr: {folder / name}.fr, en: {folder / name}.en}}}}"


def fine_tune_recipe(folder, init_from, train_spec, valid_spec, extra=""):
    """A recipe with no model or tokenizer section, as recipes/finetune_fr_en.yaml."""
    recipe = folder / "finetune.yaml"
    recipe.write_text(
        f"name: ft\nseed: 3\nout_dir: {folder / 'ft'}\n"
        f"data:\n  train: [{train_spec}]\n  valid: {valid_spec}\n  max_tokens: 512\n  max_len: 60\n"
        f"train:\n  init_from: {init_from}\n  device: cpu\n  max_steps: 50\n  eval_every: 50\n  lr: 1.0e-3\n"
        f"  warmup_steps: 5\n  report: false\n{extra}"
    )
    return recipe


@pytest.mark.slow
def test_a_multi30k_model_fine_tuned_on_tatoeba_learns_it(mirror, tmp_path):
    rows = [line.split("\t")[:2] for line in (mirror / "tatoeba" / "eng-fra.tsv").read_text().splitlines()]
    pairs = [(fr, en) for en, fr in random.Random(0).sample(rows, 3100)]
    valid = write_pairs(tmp_path, "valid", pairs[3000:])
    base = tmp_path / "base"
    train_module.main(
        [
            "recipes/multi30k.yaml",
            *TINY_MODEL,
            "tokenizer.vocab_size=500",
            "data.train=[multi30k]",
            f"data.valid={valid}",
            "data.test=null",
            "train.max_steps=30",
            "train.eval_every=30",
            "train.report=false",
            f"out_dir={base}",
        ]
    )
    recipe = fine_tune_recipe(tmp_path, base, write_pairs(tmp_path, "train", pairs[:3000]), valid)
    trained = cli("mt.train", str(recipe))
    assert trained.returncode == 0, trained.stderr
    assert f"fine-tuning from {base / 'best.pt'}" in trained.stderr
    held = [fr for fr, _ in pairs[3000:]], [en for _, en in pairs[3000:]]
    before, after = held_out_loss(base, *held), held_out_loss(tmp_path / "ft", *held)
    assert after < before - 0.1, (before, after)
    assert (tmp_path / "ft" / "tokenizer.model").read_bytes() == (base / "tokenizer.model").read_bytes()
    saved = config_from_dict(yaml.safe_load((tmp_path / "ft" / "config.yaml").read_text()))
    assert saved.model.d_model == 32 and saved.model.max_positions == 101  # from the base run


def test_an_imported_marian_model_fine_tunes(tmp_path):
    pytest.importorskip("transformers", reason="transformers (the dev extra) builds the model; .ci/run installs it")
    from random_marian import ENGLISH, FRENCH, build

    from mt.importers.marian import import_marian

    build(tmp_path / "hf")
    run = import_marian(str(tmp_path / "hf"), tmp_path / "imported", ("fr", "en"))
    rng = random.Random(1)
    words = {fr: ENGLISH[i % len(ENGLISH)] for i, fr in enumerate(FRENCH)}
    pairs = []
    for _ in range(600):
        chosen = rng.sample(FRENCH, rng.randint(2, 6))
        pairs.append((" ".join(chosen), " ".join(words[w] for w in chosen)))
    recipe = fine_tune_recipe(
        tmp_path, run, write_pairs(tmp_path, "train", pairs[:550]), write_pairs(tmp_path, "valid", pairs[550:])
    )
    trained = cli("mt.train", str(recipe))
    assert trained.returncode == 0, trained.stderr
    held = [fr for fr, _ in pairs[550:]], [en for _, en in pairs[550:]]
    before, after = held_out_loss(run, *held), held_out_loss(tmp_path / "ft", *held)
    assert after < before - 0.5, (before, after)
    assert statistics.mean(len(Translator.load(tmp_path / "ft").tokenizer.encode(e, "tgt")) for e in held[1]) > 1


def test_recipe_keys_that_disagree_with_the_starting_run_are_refused(run_dir, tmp_path):
    recipe = fine_tune_recipe(tmp_path, run_dir, "multi30k", "multi30k")
    with pytest.raises(UserError, match=r"model\.d_model is 64 here but 32 in train.init_from"):
        load_config(recipe, ["model.d_model=64"])
    with pytest.raises(UserError, match=r"tokenizer\.vocab_size is 100 here"):
        load_config(recipe, ["tokenizer.vocab_size=100"])
    cfg = load_config(
        recipe, ["model.dropout=0.3", "model.attention_dropout=0.0", "model.d_model=32"]
    )  # dropouts may change
    assert (cfg.model.dropout, cfg.model.attention_dropout, cfg.model.d_model, cfg.model.n_head) == (0.3, 0.0, 32, 2)
    with pytest.raises(UserError, match="train.init_from: .* does not exist"):
        load_config(recipe, [f"train.init_from={tmp_path / 'nowhere'}"])
    with pytest.raises(UserError, match="needs 201 positions but the model has model.max_positions"):
        load_config(recipe, ["data.max_len=200"])


def test_the_shipped_fine_tuning_recipe_starts_from_an_imported_model(mirror, tmp_path):
    pytest.importorskip("transformers", reason="transformers (the dev extra) builds the model; .ci/run installs it")
    from random_marian import build

    from mt.importers.marian import import_marian

    build(tmp_path / "hf")
    run = import_marian(str(tmp_path / "hf"), tmp_path / "opus", ("fr", "en"))
    fits = "data.max_len=60"  # the tiny model has 64 positions, OPUS-MT models 512
    cfg = load_config("recipes/finetune_fr_en.yaml", [f"train.init_from={run}", "train.device=cpu", fits])
    assert cfg.model.norm == "post" and cfg.tokenizer.kind == "marian" and cfg.model.d_model == 32
    assert cfg.data.train == ["multi30k"] and cfg.train.lr == 5e-5
    trained = cli(
        "mt.train",
        "recipes/finetune_fr_en.yaml",
        f"train.init_from={run}",
        fits,
        "train.max_steps=3",
        "train.eval_every=3",
        "train.report=false",
        f"out_dir={tmp_path / 'ft'}",
    )
    assert trained.returncode == 0, trained.stderr
    assert "fine-tuning from" in trained.stderr and (tmp_path / "ft" / "best.pt").is_file()

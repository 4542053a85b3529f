"""The translation commands through their real CLIs, on a tiny model trained on a synthetic corpus."""

import json
import subprocess
import sys

import pytest
from helpers import TINY_MODEL, cli

from mt.inference.translator import Translator

LINES = ["le chat noir", "", "le chien blanc", "la femme rouge", "le petit enfant"]


def test_arguments_file_and_stdin_agree_line_for_line(run_dir, tmp_path):
    from_args = cli("mt.translate", "--model", str(run_dir), *LINES)
    assert from_args.returncode == 0, from_args.stderr
    out = from_args.stdout.split("\n")[:-1]
    assert len(out) == len(LINES) and out[1] == ""
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n")
    from_file = cli(
        "mt.translate",
        "--model",
        str(run_dir),
        "--input",
        str(tmp_path / "in.txt"),
        "--output",
        str(tmp_path / "out.txt"),
    )
    assert from_file.returncode == 0, from_file.stderr
    assert (tmp_path / "out.txt").read_text() == from_args.stdout
    from_stdin = cli("mt.translate", "--model", str(run_dir), "--batch-size", "2", stdin="\n".join(LINES) + "\n")
    assert from_stdin.stdout == from_args.stdout
    intermixed = cli("mt.translate", LINES[0], "--model", str(run_dir), *LINES[1:])  # sentences around options
    assert intermixed.stdout == from_args.stdout, intermixed.stderr
    # each line translated alone gives the same as inside the batch: order is restored after sorting
    for line, expected in zip(LINES, out):
        assert Translator.load(run_dir).translate([line]) == [expected]


def test_model_learned_the_synthetic_task(run_dir):
    out = Translator.load(run_dir).translate(["le chat noir", "le chien blanc"], beam=1)
    assert out == ["the black cat", "the white dog"]


def test_greedy_equals_beam_one_and_sampling_is_seeded(run_dir):
    greedy = cli("mt.translate", "--model", str(run_dir), "--greedy", *LINES)
    beam1 = cli("mt.translate", "--model", str(run_dir), "--beam", "1", *LINES)
    assert greedy.returncode == 0 and greedy.stdout == beam1.stdout
    s1 = cli("mt.translate", "--model", str(run_dir), "--sample", "--seed", "5", "--temperature", "2", *LINES)
    s2 = cli("mt.translate", "--model", str(run_dir), "--sample", "--seed", "5", "--temperature", "2", *LINES)
    assert s1.returncode == 0 and s1.stdout == s2.stdout and len(s1.stdout.split("\n")) == len(LINES) + 1


def test_over_long_input_is_translated_in_pieces_and_only_sentence_mode_truncates(run_dir):
    """Text is cut where it is longer than the model takes (mt/inference/documents.py); the
    sentence-level outputs (n-best lists) still cut it short, and say so."""
    long = " ".join(["le chat noir"] * 80)
    result = cli("mt.translate", "--model", str(run_dir), long)
    assert result.returncode == 0 and len(result.stdout.split("\n")) == 2
    assert "1 of 1 sentences were longer than the model takes" in result.stderr and "warning" not in result.stderr
    listed = cli("mt.translate", "--model", str(run_dir), "--format", "tsv", long)
    assert listed.returncode == 0 and "warning: line 1 has" in listed.stderr


def test_evaluate_prints_bleu_and_chrf(run_dir):
    text = cli("mt.evaluate", "--model", str(run_dir), "--greedy")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("BLEU = ") and "chrF2 = " in text.stdout
    as_json = cli("mt.evaluate", "--model", str(run_dir), "--beam", "2", "--json", "--split", "valid")
    result = json.loads(as_json.stdout)
    assert {"bleu", "chrf", "signature", "sentences", "seconds"} <= set(result)
    assert result["sentences"] == 400 and result["chrf"] > 80  # 3-word outputs have no 4-grams: BLEU says little
    assert (run_dir / "hyp.valid.beam2.txt").read_text().count("\n") == 400


def test_evaluate_refuses_an_empty_test_set_in_one_line(run_dir, tmp_path):
    (tmp_path / "empty.fr").write_text("")
    (tmp_path / "empty.en").write_text("")
    result = cli(
        "mt.evaluate", "--model", str(run_dir), "--src", str(tmp_path / "empty.fr"), "--ref", str(tmp_path / "empty.en")
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: {tmp_path / 'empty.fr'} holds no sentences to score"]


def test_no_model_says_how_to_train(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mt.translate", "bonjour"], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "error: no trained model in runs/fr_en; train one with: python -m mt.train recipes/fr_en.yaml"
    )


@pytest.mark.slow
def test_fr_en_recipe_end_to_end_on_multi30k(mirror, tmp_path):
    """Real data through MT_DATA_MIRROR: a tiny model on a Multi30k subset (its 1,014 validation pairs)."""
    env = {"MT_DATA_MIRROR": str(mirror), "MT_DATA_DIR": str(tmp_path / "data")}
    out = tmp_path / "run"
    trained = cli(
        "mt.train",
        "recipes/multi30k.yaml",
        *TINY_MODEL,
        "tokenizer.vocab_size=1000",
        "data.max_tokens=2048",
        "data.train=[multi30k:val]",
        "train.max_steps=20",
        "train.eval_every=20",
        f"out_dir={out}",
        env=env,
    )
    assert trained.returncode == 0, trained.stderr
    assert "train: 1,014 pairs" in trained.stderr and "val_bleu" in trained.stderr
    translated = cli("mt.translate", "--model", str(out), "les réseaux de neurones sont géniaux!", env=env)
    assert translated.returncode == 0 and translated.stdout.count("\n") == 1
    scored = cli("mt.evaluate", "--model", str(out), "--greedy", "--json", env=env)
    assert scored.returncode == 0, scored.stderr
    assert json.loads(scored.stdout)["sentences"] == 1000


def test_int8_quantized_translation_keeps_lines_and_quality(run_dir):
    plain = cli("mt.evaluate", "--model", str(run_dir), "--greedy", "--json")
    quantized = cli("mt.evaluate", "--model", str(run_dir), "--greedy", "--json", "--quantize", "int8")
    assert quantized.returncode == 0, quantized.stderr
    a, b = json.loads(plain.stdout), json.loads(quantized.stdout)
    assert b["sentences"] == a["sentences"] and b["decoding"] == "int8-greedy"
    assert abs(a["chrf"] - b["chrf"]) < 5
    lines = (run_dir / "hyp.test.int8-greedy.txt").read_text().split("\n")[:-1]
    assert len(lines) == a["sentences"]


def test_end_of_training_report(run_dir):
    """Training ended by scoring best.pt on the test set with the recipe's beam and writing results.json."""
    results = json.loads((run_dir / "results.json").read_text())
    ((label, scores),) = results["test"].items()
    assert label == "c" and scores["sentences"] == 400 and scores["chrf"] > 90  # 3-word sentences: no 4-grams for BLEU
    assert results["signature"]["bleu"].startswith("nrefs:1|case:mixed")
    assert results["demo"]["source"] == "les réseaux de neurones sont géniaux!" and "translation" in results["demo"]


def test_average_of_two_checkpoints_is_their_mean_and_translates(run_dir, tmp_path):
    import shutil

    import torch

    from mt.checkpoint import load_checkpoint, save_checkpoint

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    a = load_checkpoint(run / "best.pt")
    b = {
        **a,
        "model": {k: v + 0.01 * torch.randn_like(v) if v.is_floating_point() else v for k, v in a["model"].items()},
    }
    save_checkpoint(tmp_path / "b.pt", b)
    result = cli("mt.average", str(run / "best.pt"), "--out", str(run / "averaged.pt"), str(tmp_path / "b.pt"))
    assert result.returncode == 0, result.stderr
    averaged = load_checkpoint(run / "averaged.pt")
    for name, tensor in a["model"].items():
        assert torch.allclose(averaged["model"][name], (tensor + b["model"][name]) / 2, atol=1e-7), name
    out = cli("mt.translate", "--model", str(run / "averaged.pt"), "--greedy", "le chat noir")
    assert out.returncode == 0 and out.stdout == "the black cat\n", out.stderr
    refused = cli("mt.average", str(run))  # a run directory without snapshots
    assert refused.returncode == 2 and "train.average_last" in refused.stderr


def test_output_into_a_missing_folder_is_refused_before_any_work(run_dir, tmp_path):
    """--output, --attention and --out name files written at the end: a typo in the folder is one line
    at the start (mt.translate does not even load its model: a missing one would be named otherwise)."""
    missing, no_model = tmp_path / "no-folder", str(tmp_path / "no-model")
    best = str(run_dir / "best.pt")
    for command, flag, name, rest in [
        ("mt.translate", "--output", "out.en", ["--model", no_model, "le chat"]),
        ("mt.translate", "--attention", "a.png", ["--model", no_model, "le chat"]),
        ("mt.plot", "--out", "curves.png", [str(run_dir)]),
        ("mt.average", "--out", "avg.pt", [best, best]),
    ]:
        result = cli(command, *rest, flag, str(missing / name))
        assert result.returncode == 2, (command, result.stderr)
        expected = f"error: {flag} {missing / name}: no folder {missing}; create it first"
        assert result.stderr.strip().splitlines() == [expected], command
    assert not missing.exists()


def test_validation_bleu_during_training_equals_evaluate_on_valid(run_dir):
    best_row = max(
        (json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()), key=lambda r: r["val_bleu"]
    )
    result = cli("mt.evaluate", "--model", str(run_dir), "--split", "valid", "--greedy", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["bleu"] == best_row["val_bleu"]


def test_installed_commands_work_like_the_module_forms(run_dir):
    """Every command module (mt/<command>.py with a main) is a console script mt-<command>, installed;
    the recipe reference's generator is a maintainer's tool, not a command."""
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    commands = {p.stem for p in (repo / "mt").glob("*.py") if "\ndef main(" in p.read_text()} - {"recipe_reference"}
    section = (repo / "pyproject.toml").read_text().split("[project.scripts]")[1].split("\n[")[0]
    scripts = dict(re.findall(r'^(mt-\w+) = "([\w.:]+)"', section, re.M))
    assert scripts == {f"mt-{c}": f"mt.{c}:main" for c in commands} and "bench" in commands
    bin_dir = Path(sys.executable).parent
    for name in scripts:
        assert (bin_dir / name).is_file(), f"{name} is not installed; pip install -e . adds it"
    result = subprocess.run(
        [str(bin_dir / "mt-translate"), "--model", str(run_dir), "--greedy", "le chat noir"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0 and result.stdout == "the black cat\n", result.stderr

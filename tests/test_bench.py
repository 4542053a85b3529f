"""The benchmark entry point runs in its quick mode and reports every row; timings are never asserted."""

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch


@pytest.mark.slow
def test_bench_quick_prints_table_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "mt.bench", "--quick", "--device", "cpu", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "char GPT" in result.stdout and "translation Transformer" in result.stdout
    data = json.loads(out.read_text())
    assert [r["model"] for r in data["training"]] == ["char GPT", "translation Transformer"]
    assert all(r["tokens_per_s"] > 0 and r["mfu"] is None for r in data["training"])  # no known peak on CPU
    assert {(r["decoding"], r["batch"], r["kv_cache"]) for r in data["decoding"]} == {
        (d, b, c) for d in ("greedy", "beam5") for b in (1, 4) for c in (True, False)
    }
    lengths = {}
    for r in data["decoding"]:
        lengths.setdefault((r["decoding"], r["batch"]), set()).add(r["mean_output_tokens"])
    assert all(len(v) == 1 for v in lengths.values())  # the same outputs with and without the cache

    # Time to quality: real runs when the corpora can be had, else a reason.
    assert [r["model"] for r in data["quality"]] == ["char GPT", "translation Transformer"]
    for r in data["quality"]:
        if os.environ.get("MT_DATA_MIRROR"):
            assert "skipped" not in r, r
        if "skipped" in r:
            assert r["skipped"] and f"{r['model']:<26}skipped: " in result.stdout
            continue
        times = [c["elapsed_s"] for c in r["curve"]]
        assert len(times) == 2 and times == sorted(times) and all(r["metric"] in c for c in r["curve"])
    loss = [c["val_loss"] for c in data["quality"][0].get("curve", [])]
    assert loss == sorted(loss, reverse=True)  # the char model learns within its 100 steps


def tiny_translation(tmp_path) -> list[str]:
    """Overrides for a tiny translation model on a synthetic corpus."""
    from helpers import TINY_MODEL, synthetic_corpus

    spec = synthetic_corpus(tmp_path, 400)
    return [*TINY_MODEL, f"data.train=[{spec}]", f"data.valid={spec}", f"data.test={spec}"]


def run_bench(script: str, *args, out) -> subprocess.CompletedProcess:
    """A bench/ script run as a user would, writing its JSON to `out`."""
    command = [sys.executable, script, *args, "--out", str(out)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_profile_step_splits_a_training_step(tmp_path):
    """bench/profile_step.py on a tiny model: every phase and the matmuls are timed, the parts fit
    inside the step, and the real-token share is a share."""
    out = tmp_path / "profile.json"
    overrides = tiny_translation(tmp_path)
    result = run_bench(
        "bench/profile_step.py",
        "recipes/multi30k.yaml",
        *overrides,
        "--steps",
        "3",
        "--precision",
        "fp32",
        "bf16",
        out=out,
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["precision"] for r in rows] == ["fp32", "bf16"]
    for r in rows:
        phases = r["phases_ms"]
        assert set(phases) == {"data", "forward+loss", "backward", "clip", "optimizer"}
        assert phases["forward+loss"] > 0 and phases["backward"] > 0 and phases["optimizer"] > 0
        assert sum(phases.values()) <= r["step_ms"] * 1.05  # the phases are parts of the step
        kinds = r["forward_backward_kinds_ms"]
        assert kinds["matmul"] > 0 and kinds["loss"] > 0 and kinds["layer norm"] > 0
        assert sum(kinds.values()) <= (phases["forward+loss"] + phases["backward"]) * 1.05
        assert 0 < r["real_token_share"] <= 1 and r["target_tokens_per_s"] > 0
    assert "matmul" in result.stdout and "outside operators" in result.stdout


def test_profile_step_times_the_step_with_the_trainers_memory_settings(tmp_path, monkeypatch):
    """The profile runs under the process settings the trainer applies before its first step (freed
    blocks kept, oneDNN's caches bounded): without them, 8 MB gradients came from freshly mapped
    pages, and filling them took 33 ms of a bf16 fr_en step instead of 12."""
    spec = importlib.util.spec_from_file_location("profile_step", "bench/profile_step.py")
    profile_step = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(profile_step)
    settled = []
    real = profile_step.settle_memory

    def recording(cfg, device, precision):
        settled.append((device.type, precision))
        return real(cfg, device, precision)

    def profiling(cfg, task, device, precision, steps, trace):
        assert settled, "profiled before the trainer's settings were applied"
        return {"precision": precision}

    monkeypatch.setattr(profile_step, "settle_memory", recording)
    monkeypatch.setattr(profile_step, "profile_precision", profiling)
    monkeypatch.setattr(profile_step, "print_table", lambda rows: None)
    args = ["recipes/multi30k.yaml", *tiny_translation(tmp_path), f"out_dir={tmp_path}/run", "train.device=cpu"]
    profile_step.main([*args, "--precision", "fp32", "bf16", "--out", str(tmp_path / "p.json")])
    assert settled == [("cpu", "bf16")]  # once, for the precisions asked for
    assert [r["precision"] for r in json.loads((tmp_path / "p.json").read_text())["rows"]] == ["fp32", "bf16"]


def load_train_speed():
    """bench/train_speed.py as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("train_speed", "bench/train_speed.py")
    train_speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_speed)
    return train_speed


def test_train_speed_reads_a_progress_bar():
    train_speed = load_train_speed()
    readings = train_speed.readings

    bar = "  5/70 [00:09<01:51, tok_s=1,100]\r 10/70 [00:17<01:40, loss=5.1, tok_s=1,805]\r"
    bar += " 20/70 [00:33, tok_s=2,012]\n"
    assert readings(bar, 10) == [1805.0, 2012.0]
    assert readings("no bar here", 0) == []


def test_train_speed_takes_settings_before_a_revision():
    train_speed = load_train_speed()

    assert train_speed.split_spec("HEAD~2") == ("HEAD~2", {})
    assert train_speed.split_spec("A=1 B=x=y .") == (".", {"A": "1", "B": "x=y"})
    for bad in ("", "A=1 HEAD .", "A=1"):
        with pytest.raises(SystemExit, match="NAME=VALUE"):
            train_speed.split_spec(bad)


@pytest.mark.slow
def test_train_speed_compares_a_revision_with_the_working_tree(tmp_path):
    """bench/train_speed.py on a tiny model: HEAD (in a git worktree) and the working tree under a
    setting, one round each, every run with a tokens/s reading and a peak RSS; the first is 1.0x."""
    out = tmp_path / "speed.json"
    overrides = [*tiny_translation(tmp_path), "train.log_every=2"]
    result = run_bench(
        "bench/train_speed.py",
        *overrides,
        "--recipe",
        "recipes/multi30k.yaml",  # the tiny corpus repeats its pairs, which fr_en's cleaning would drop
        "--rev",
        "HEAD",
        "--rev",
        "OMP_NUM_THREADS=1 .",  # the working tree, under a setting of its own
        "--steps",
        "6",
        "--skip",
        "2",
        "--rounds",
        "1",
        out=out,
    )
    assert result.returncode == 0, result.stderr
    revisions = json.loads(out.read_text())["revisions"]
    assert [r["rev"] for r in revisions] == ["HEAD", "OMP_NUM_THREADS=1 ."] and revisions[0]["ratio"] == 1.0
    for r in revisions:
        (run,) = r["runs"]
        assert run["tokens_per_s"] > 0 and run["peak_rss_mb"] > 100  # torch alone is over 200 MB
    assert "target tokens/s" in result.stdout


@pytest.mark.slow
def test_decode_bench_times_the_engines_asked_for_on_the_runs_test_set(run_dir, tmp_path):
    """bench/decode.py on the tiny run: each engine named gives a greedy and a beam-5 row on the
    run's own test set, ratios are taken against CTranslate2 int8 where it ran, and an unknown
    engine is refused with the list of known ones."""
    out = tmp_path / "decode.json"
    script = str(Path("bench/decode.py").resolve())
    engines = ("mt int8 (processes)", "CTranslate2 int8")  # the plain "mt" row runs alone below
    result = run_bench(script, "--model", str(run_dir), "--engines", ",".join(engines), "--limit", "8", out=out)
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    assert data["device"] == "cpu" and data["sentences"] == 8 and data["test"]["data_files"]["fr"].endswith("c.fr")
    rows = {(r["engine"], r["decoding"]): r for r in data["rows"]}
    assert set(rows) == {(e, d) for e in engines for d in ("greedy", "beam5")}
    assert all(rows["CTranslate2 int8", d]["vs_peer"] == 1.0 for d in ("greedy", "beam5"))
    assert all(rows["CTranslate2 int8", d]["vs_peer_paired"] == 1.0 for d in ("greedy", "beam5"))
    assert all(r["seconds"] > 0 and r["vs_peer"] > 0 for r in rows.values())

    alone = run_bench(script, "--model", str(run_dir), "--engines", "mt", "--limit", "8", "--max-len", "1", out=out)
    assert alone.returncode == 0, alone.stderr
    data = json.loads(out.read_text())
    assert all(r["vs_peer"] is None and r["vs_peer_paired"] is None for r in data["rows"])
    assert data["max_len"] == 1 and all(r["output_words"] <= r["sentences"] for r in data["rows"])  # one piece each
    assert " n/a" in alone.stdout

    refused = run_bench(script, "--model", str(run_dir), "--engines", "mt,bogus", out=out)
    assert refused.returncode == 2 and "unknown engine(s) ['bogus']" in refused.stderr


@pytest.mark.slow
def test_decode_bench_times_a_student_against_its_teachers_row(run_dir, tmp_path):
    """With several runs, every run decodes the first run's test set and each row's time is taken
    against the peer engine on the first run: a copy of the teacher, its own peer's equal, comes
    out near 1 against it, and the rows say which run they are."""
    student = shutil.copytree(run_dir, tmp_path / "student")
    out, script = tmp_path / "decode.json", str(Path("bench/decode.py").resolve())
    args = ("--model", str(run_dir), str(student), "--engines", "mt int8", "--peer", "mt int8", "--limit", "8")
    result = run_bench(script, *args, out=out)
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    rows = {(Path(r["model"]).name, r["decoding"]): r for r in data["rows"]}
    assert set(rows) == {(m, d) for m in (run_dir.name, "student") for d in ("greedy", "beam5")}
    assert all(rows[run_dir.name, d]["vs_peer"] == 1.0 for d in ("greedy", "beam5"))
    assert all(rows["student", d]["bleu"] == rows[run_dir.name, d]["bleu"] for d in ("greedy", "beam5"))
    assert all(0.2 < rows["student", d]["vs_peer_paired"] < 5 for d in ("greedy", "beam5"))
    assert data["peer"] == "mt int8" and "student: mt int8" in result.stdout


def test_decode_bench_pairs_each_round_with_the_peers_same_round():
    """The paired ratio is the median of the rounds' own ratios: a round where the machine slowed
    both engines alike does not count against either, where the fastest rounds' ratio can mislead."""
    spec = importlib.util.spec_from_file_location("decode_bench", "bench/decode.py")
    decode_bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(decode_bench)
    mine, peer = [3.3, 4.4, 3.1], [3.0, 4.0, 3.3]  # rounds: 1.10x, 1.10x, 0.94x
    assert decode_bench.paired_ratio(mine, peer) == 1.1
    assert round(min(mine) / min(peer), 2) == 1.03  # the fastest rounds say otherwise
    assert decode_bench.paired_ratio([2.0], [4.0]) == 0.5


@pytest.mark.slow
def test_decode_bench_runs_transformers_on_the_model_a_run_was_imported_from(run_dir, tmp_path):
    """The `transformers fp32` row decodes with MarianMTModel.generate from the folder an imported
    run came from: greedy, on the same weights, it gives mt's texts (so the same BLEU and words). A
    run trained here has no such folder and is refused in one line."""
    import pytest

    pytest.importorskip("transformers", reason="the transformers row needs it; .ci/run installs it")
    from random_marian import ENGLISH, FRENCH, build, sentences

    from mt.importers.marian import import_marian

    build(tmp_path / "hf")
    run = import_marian(str(tmp_path / "hf"), tmp_path / "run", ("fr", "en"))
    (tmp_path / "t.fr").write_text("\n".join(sentences(FRENCH, 12, seed=5)) + "\n")
    (tmp_path / "t.en").write_text("\n".join(sentences(ENGLISH, 12, seed=6)) + "\n")
    spec = f"{{path: text, data_files: {{fr: {tmp_path / 't.fr'}, en: {tmp_path / 't.en'}}}}}"
    out, script = tmp_path / "decode.json", str(Path("bench/decode.py").resolve())
    engines = "mt fp32,transformers fp32"
    result = run_bench(script, "--model", str(run), "--test", spec, "--engines", engines, "--max-len", "30", out=out)
    assert result.returncode == 0, result.stderr
    rows = {(r["engine"], r["decoding"]): r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {(e, d) for e in ("mt fp32", "transformers fp32") for d in ("greedy", "beam5")}
    mt_greedy, theirs = rows["mt fp32", "greedy"], rows["transformers fp32", "greedy"]
    assert theirs["sentences"] == 12 and theirs["output_words"] > 12 and theirs["seconds"] > 0
    assert (theirs["bleu"], theirs["output_words"]) == (mt_greedy["bleu"], mt_greedy["output_words"])

    refused = run_bench(script, "--model", str(run_dir), "--engines", "transformers fp32", "--limit", "2", out=out)
    assert refused.returncode == 2 and "was not made by mt.import" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_bench_compile_trains_through_the_compiled_module(monkeypatch):
    """`mt.bench --compile` times steps of the model through torch.compile (a tiny char GPT here:
    compiling takes seconds), and its row says so."""
    import torch

    import mt.bench
    from mt.config import load_config
    from mt.model import build_model

    cfg = load_config("recipes/shakespeare_char.yaml", ["model.n_layer=1", "model.d_model=32", "model.n_head=2"])
    model = build_model(cfg, 69)
    setting = mt.bench.gpt_setting(False) | {
        "cfg": cfg,
        "model": model,
        "batch": lambda device: ((torch.randint(4, 69, (2, 16)),), torch.randint(4, 69, (2, 16))),
        "tokens": 32,
    }
    compiled, compile = [], torch.compile
    monkeypatch.setattr(torch, "compile", lambda module: compiled.append(module) or compile(module))
    before = [p.detach().clone() for p in model.parameters()]
    row = mt.bench.measure_training(setting, torch.device("cpu"), "fp32", steps=2, compiled=True)
    assert compiled == [model] and row["shape"].endswith(", compiled") and row["step_ms"] > 0
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))  # the steps trained the model


def test_opus_shape_builds_an_imported_run_of_the_shape_asked_for_whose_outputs_never_end(tmp_path, monkeypatch):
    """bench/opus_shape.py, shrunk: its MarianMT model is saved and imported with the configured
    shape and a vocabulary in Marian's order filled up to size, and every output runs to the
    length limit, so engines compared on it decode the same number of steps."""
    import pytest

    pytest.importorskip("transformers", reason="transformers builds the Marian model; .ci/run installs it")
    from mt.inference.translator import Translator

    spec = importlib.util.spec_from_file_location("opus_shape", "bench/opus_shape.py")
    opus_shape = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(opus_shape)
    small = dict(vocab_size=300, d_model=16, encoder_attention_heads=2, decoder_attention_heads=2)
    small |= dict(encoder_layers=1, decoder_layers=1, encoder_ffn_dim=32, decoder_ffn_dim=32)
    monkeypatch.setattr(opus_shape, "OPUS_MT_FR_EN", opus_shape.OPUS_MT_FR_EN | small)
    monkeypatch.setattr(opus_shape, "PIECES", (40, 40))
    french = [f"le chat {w} est sur la table numéro {i}" for i, w in enumerate(["noir", "blanc", "gris"] * 40)]
    english = [f"the {w} cat is on table number {i}" for i, w in enumerate(["black", "white", "grey"] * 40)]
    monkeypatch.setattr(opus_shape, "load_pairs", lambda *args: None)
    monkeypatch.setattr(opus_shape, "columns", lambda *args: (french, english))

    opus_shape.main(["--out", str(tmp_path / "run")])
    vocab = json.loads((tmp_path / "run-marian" / "vocab.json").read_text())
    assert len(vocab) == 300 and vocab["</s>"] == 0 and vocab["<unk>"] == 1 and vocab["<pad>"] == 299
    translator = Translator.load(str(tmp_path / "run"))
    model = translator.cfg.model
    assert (model.d_model, model.enc_layers, model.dec_layers, model.d_ff, model.activation) == (16, 1, 1, 32, "swish")
    found = translator.translate(["le chat noir", "la table numéro 7 est blanche"], beam=3, max_len=6, hypotheses=True)
    assert [len(hyps[0].ids) for hyps in found] == [6, 6]
    greedy = translator.translate(["le chat"], beam=1, max_len=9, hypotheses=True)
    assert len(greedy[0][0].ids) == 9


def load_gpt_peer():
    spec = importlib.util.spec_from_file_location("gpt_peer", "bench/gpt_peer.py")
    gpt_peer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpt_peer)
    return gpt_peer


def test_gpt_peer_compares_like_for_like_models_in_one_process(tmp_path):
    """bench/gpt_peer.py: both models have nanoGPT's CPU shape (they differ only by mt's four
    special-token rows), each block times both, and the ratio is the peer's time over mt's."""
    gpt_peer = load_gpt_peer()
    out = tmp_path / "peer.json"
    result = gpt_peer.main(["--blocks", "4", "--block-steps", "2", "--precision", "fp32", "--out", str(out)])
    assert json.loads(out.read_text()) == result
    assert result["shape"] == "4 layers, 128 dims, batch 12 x 64"
    assert result["params"]["mt"] - result["params"]["peer"] == 4 * 128
    (row,) = result["rows"]
    assert row["mt_precision"] == "fp32" and row["mt_ms"] > 0 and row["peer_ms"] > 0
    low, high = row["quartiles"]
    assert low <= row["speedup"] <= high


@pytest.mark.parametrize("setting, expected", [("none", set()), ("mt", {"GPT"}), ("both", {"GPT", "PeerGPT"})])
def test_gpt_peer_compiles_the_models_its_option_names(monkeypatch, tmp_path, setting, expected):
    """--compile mt passes mt's model alone through torch.compile (recorded here, not compiled, to
    keep the test fast); both adds the peer's; each compiled model is the one its steps run."""
    gpt_peer = load_gpt_peer()
    compiled, ran = [], set()

    def record(module):
        compiled.append(type(module).__name__)
        return lambda *args: ran.add(type(module).__name__) or module(*args)

    monkeypatch.setattr(torch, "compile", record)
    argv = ["--blocks", "2", "--block-steps", "1", "--precision", "fp32", "--compile", setting]
    result = gpt_peer.main([*argv, "--out", str(tmp_path / "peer.json")])
    assert set(compiled) == expected == ran and len(compiled) == len(expected)
    assert result["compiled"] == setting


def test_gpt_peer_trains_its_model():
    """The peer's step is a real training step: its loss on a repeated batch falls."""
    gpt_peer = load_gpt_peer()
    torch.manual_seed(0)
    model = gpt_peer.PeerGPT(gpt_peer.CHARS, 64, layers=2, heads=4, d=128)
    optimizer = gpt_peer.peer_optimizer(model, weight_decay=0.1, lr=1e-3, beta2=0.99)
    x, y = torch.randint(gpt_peer.CHARS, (2, 4, 64)).unbind()
    losses = []
    for _ in range(30):
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert abs(losses[0] - math.log(gpt_peer.CHARS)) < 0.1  # untrained: about uniform over the characters
    assert losses[-1] < losses[0] - 1.0


@pytest.mark.slow
def test_decode_profile_splits_decoding_into_parts_with_and_without_a_shortlist(run_dir, tmp_path):
    """bench/decode_profile.py on a copy of the tiny run with a shortlist learned from its corpus:
    both ways are timed and every part took time; a part timed inside another would have stopped
    the script (its `time_parts` refuses to count time twice)."""
    from helpers import synthetic_corpus

    run = Path(shutil.copytree(run_dir, tmp_path / "run"))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    synthetic_corpus(corpus, 400)
    pairs = ["--src", str(corpus / "c.fr"), "--tgt", str(corpus / "c.en")]
    learned = subprocess.run([sys.executable, "-m", "mt.shortlist", str(run), *pairs], capture_output=True, text=True)
    assert learned.returncode == 0, learned.stderr
    out = tmp_path / "profile.json"
    result = run_bench(str(Path("bench/decode_profile.py").resolve()), "--model", str(run), "--limit", "8", out=out)
    assert result.returncode == 0, result.stderr
    ways = json.loads(out.read_text())["ways"]
    assert set(ways) == {"whole vocabulary", "shortlist"}
    for way in ways.values():
        parts = way["parts"]
        assert set(parts) == {"encoder", "decoder layers", "output layer + softmax", "top-k", "cache moves", "the rest"}
        assert all(seconds > 0 for name, seconds in parts.items() if name != "cache moves")
        assert parts["the rest"] >= 0

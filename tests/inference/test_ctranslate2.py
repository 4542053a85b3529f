"""Export to CTranslate2 and translate with it: the same greedy outputs as mt's own fp32 search."""

import itertools

import pytest
from helpers import COLOURS, WORDS, cli

ctranslate2 = pytest.importorskip(
    "ctranslate2", reason="the ctranslate2 extra is not installed (pip install 'mt[ctranslate2]'); .ci/run installs it"
)


def sentences():
    """Three dozen inputs: the training pattern and variations on it the model never saw."""
    seen = [f"le {n} {c}" for n, c in itertools.product(WORDS, COLOURS)][:20]
    unseen = [f"un {n}" for n in WORDS] + [
        f"le {n} {c} et le {m}" for n, c, m in zip(WORDS, COLOURS, reversed(list(WORDS)))
    ]
    return seen + unseen + ["chat", "noir noir noir", "le le le"]


def test_exported_model_gives_mts_greedy_outputs(run_dir, tmp_path):
    out = tmp_path / "ct2"
    exported = cli("mt.export", "--model", str(run_dir), "--format", "ctranslate2", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    assert (out / "model.bin").is_file() and (out / "tokenizer.model").is_file()
    src = sentences()
    ours = cli("mt.translate", "--model", str(run_dir), "--greedy", *src)
    theirs = cli("mt.translate", "--engine", "ctranslate2", "--model", str(out), "--greedy", *src)
    assert theirs.returncode == 0, theirs.stderr
    assert len(src) >= 30 and theirs.stdout.splitlines() == ours.stdout.splitlines()
    assert "note:" not in theirs.stderr  # greedy search: nothing it does not follow
    again = cli("mt.export", "--model", str(run_dir), "--out", str(out))
    assert again.returncode == 2 and "not empty" in again.stderr


def test_int8_export_translates_and_evaluates(run_dir, tmp_path):
    out = tmp_path / "ct2-int8"
    assert cli("mt.export", "--model", str(run_dir), "--out", str(out), "--quantization", "int8").returncode == 0
    scored = cli("mt.evaluate", "--engine", "ctranslate2", "--model", str(out), "--beam", "2", "--json")
    assert scored.returncode == 0, scored.stderr
    assert '"decoding": "ctranslate2-beam2"' in scored.stdout and '"sentences": 400' in scored.stdout
    assert scored.stderr.count("note: decode.scoring gnmt is not followed") == 1  # the run's beams, said once
    tagged = ["<p>le <b>chat</b> noir</p>", "<p>un <i>chien</i></p>"]
    html = cli("mt.translate", "--engine", "ctranslate2", "--model", str(out), "--input-format", "html", *tagged)
    assert html.returncode == 0, html.stderr
    assert [line.count("<b>") + line.count("<i>") for line in html.stdout.splitlines()] == [1, 1]
    assert html.stderr.count("markup goes back by token position") == 1  # no attention to align by, said once
    plain = cli(
        "mt.translate", "--engine", "ctranslate2", "--model", str(out), "--input-format", "html", "<p>le chat</p>"
    )
    assert plain.returncode == 0 and "markup goes back" not in plain.stderr  # no markup, nothing to say
    (tmp_path / "terms.tsv").write_text("chat\tdog\n")
    glossary = cli(
        "mt.translate",
        "--engine",
        "ctranslate2",
        "--model",
        str(out),
        "--glossary",
        str(tmp_path / "terms.tsv"),
        "le chat",
    )
    assert (
        glossary.returncode == 2
        and "no constrained search" in glossary.stderr
        and len(glossary.stderr.splitlines()) == 1
    )


def test_an_mt_run_directory_is_not_a_ctranslate2_model(run_dir):
    result = cli("mt.translate", "--engine", "ctranslate2", "--model", str(run_dir), "bonjour")
    assert result.returncode == 2 and "python -m mt.export" in result.stderr


def test_the_shortlist_is_exported_as_a_vocabulary_map_and_used(run_dir, tmp_path):
    import shutil

    import torch

    from mt.inference.shortlist import Shortlist
    from mt.inference.translator import Translator

    run = shutil.copytree(run_dir, tmp_path / "run")
    tokenizer = Translator.load(run).tokenizer
    ids = sorted(set(tokenizer.encode("the black dog", "tgt")))
    vocab = tokenizer.vocab_size
    Shortlist(torch.full((vocab, 1), ids[0]), torch.tensor(ids), vocab, tokenizer.fingerprint()).save(run)
    out = tmp_path / "ct2"
    assert cli("mt.export", "--model", str(run), "--out", str(out)).returncode == 0
    lines = (out / "vmap.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("\t") and len(lines) > 10 and all(line.count("\t") == 1 for line in lines)
    short = cli("mt.translate", "--engine", "ctranslate2", "--model", str(out), "--greedy", "le chat noir")
    whole = cli(
        "mt.translate", "--engine", "ctranslate2", "--model", str(out), "--greedy", "--no-shortlist", "le chat noir"
    )
    assert short.returncode == 0 and whole.returncode == 0, short.stderr + whole.stderr
    assert "cat" not in short.stdout and whole.stdout == "the black cat\n"


def test_an_output_that_loops_is_cut_where_mts_is(tmp_path):
    """Both engines cap an output by one rule (mt.inference.search's output_limit): twice its source
    plus 10 tokens, or the decode section's max_len. A random model, which rarely ends a sentence,
    loops into both caps, and the two engines' outputs are the same token for token."""
    import dataclasses

    from random_marian import FRENCH, build, sentences

    from mt.importers.marian import import_marian
    from mt.inference.ctranslate2_engine import CTranslate2Translator
    from mt.inference.search import output_limit
    from mt.inference.translator import Translator

    build(tmp_path / "hf")
    run = import_marian(str(tmp_path / "hf"), tmp_path / "run", ("fr", "en"))
    assert cli("mt.export", "--model", str(run), "--out", str(tmp_path / "ct2")).returncode == 0
    ours, theirs = Translator.load(run), CTranslate2Translator(tmp_path / "ct2")
    src = sentences(FRENCH, 12, 3)
    for max_len in (None, ours.options.max_len):  # the rule relative to the source, and the run's own cap
        options = dataclasses.replace(ours.options, beam=1, max_len=max_len)
        mine = [h[0].ids for h in ours.translate(src, options, hypotheses=True)]
        assert [h[0].ids for h in theirs.translate(src, options, hypotheses=True)] == mine
        caps = [output_limit(len(ids) + 1, ours.max_src_tokens + 1, max_len) - 1 for ids in ours.encode(src)]
        assert any(len(ids) == cap for ids, cap in zip(mine, caps)), f"no output reached its cap ({max_len=})"


def test_an_export_scores_its_tokens_as_mt_does_and_keeps_the_runs_calibrator(run_dir, tmp_path):
    """CTranslate2's search gives a total alone: its outputs' tokens are scored by forced decoding,
    to about the numbers mt's search keeps (CTranslate2's softmax also counts <pad> and <START>,
    which mt's leaves out: a little lower); the run's calibrator, fitted to the checkpoint
    exported, goes along, and the confidences agree to a few hundredths."""
    from mt.inference.confidence import FILE
    from mt.inference.ctranslate2_engine import CTranslate2Translator
    from mt.inference.translator import Translator

    ours = Translator.load(run_dir)
    assert (run_dir / FILE).is_file()  # fitted at the end of the fixture's training
    out = tmp_path / "ct2"
    assert cli("mt.export", "--model", str(run_dir), "--out", str(out)).returncode == 0
    assert (out / FILE).read_text() == (run_dir / FILE).read_text()
    theirs = CTranslate2Translator(out)
    src = sentences()[:12]
    best = [h[0] for h in ours.translate(src, beam=1, hypotheses=True)]
    scored = theirs.token_logprobs(src, [h.ids for h in best])
    for h, logprobs in zip(best, scored):
        assert len(logprobs) == len(h.logprobs) and logprobs == pytest.approx(h.logprobs, abs=0.03)
        assert sum(logprobs) <= sum(h.logprobs) + 1e-3
    found = [h[0] for h in theirs.translate(src, beam=1, hypotheses=True)]
    assert [c.score for c in theirs.confidence(src, found)] == pytest.approx(
        [c.score for c in ours.confidence(src, best)], abs=0.05
    )

"""Decoding options, n-best lists, forced scoring, attention pictures, alignments and ensembles,
through the real commands on the session's tiny trained model."""

import json
import re
import shutil
import time

import pytest
import torch
from helpers import cli

from mt.cpu.workers import map_batches
from mt.decode_options import DecodeOptions
from mt.errors import UserError
from mt.inference.translator import Translator

SOURCES = ["le chat noir", "le chien blanc", "la femme rouge", "le petit enfant", "le homme noir", "un chat"]


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"beam": 0}, "beam must be >= 1"),
        ({"top_k": 0, "temperature": 1.0, "beam": 1}, "top_k must be a positive"),
        ({"top_p": 0.0, "temperature": 1.0, "beam": 1}, "top_p must be a probability"),
        ({"temperature": 0.5, "beam": 4}, "use beam 1"),
        ({"n_best": 3, "beam": 2}, "n_best must be between 1 and the beam size (2)"),
        ({"top_k": 5}, "give a temperature > 0"),
        ({"max_len": -1}, "max_len must be a positive"),
        ({"beam": "5"}, "beam must be an integer"),
    ],
)
def test_options_are_checked_in_one_place(changes, words):
    with pytest.raises(UserError, match=re.escape(words)):
        DecodeOptions(**changes)


def test_recipe_decode_section_is_checked_and_named(tmp_path):
    from mt.config import load_config

    with pytest.raises(UserError, match=re.escape("decode.n_best must be between 1 and the beam size (5)")):
        load_config("recipes/multi30k.yaml", ["decode.n_best=9"])
    with pytest.raises(UserError, match="unknown key 'decode.beem'"):
        load_config("recipes/multi30k.yaml", ["decode.beem=2"])


@pytest.mark.parametrize(
    "flags",
    [
        ["--sample", "--top-k", "0"],
        ["--sample", "--top-p", "0"],
        ["--beam", "2", "--n-best", "3"],
        ["--top-k", "5"],
        ["--sample", "--temperature", "-1"],
        ["--batch-size", "0"],
    ],
)
def test_bad_decoding_flags_are_one_line_errors(run_dir, flags):
    result = cli("mt.translate", "--model", str(run_dir), *flags, "le chat noir")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr


def test_n_best_lists_as_tsv_and_jsonl(run_dir):
    result = cli("mt.translate", "--model", str(run_dir), "--beam", "4", "--n-best", "3", *SOURCES)
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert [int(r[0]) for r in rows] == [i for i in range(len(SOURCES)) for _ in range(3)]
    for i in range(len(SOURCES)):
        scores = [float(r[1]) for r in rows if int(r[0]) == i]
        assert scores == sorted(scores, reverse=True)
    best = cli("mt.translate", "--model", str(run_dir), "--beam", "4", *SOURCES).stdout.splitlines()
    assert [r[2] for r in rows[::3]] == best  # the first of each n-best list is the 1-best output
    as_json = cli(
        "mt.translate", "--model", str(run_dir), "--beam", "4", "--n-best", "2", "--format", "jsonl", *SOURCES
    )
    objects = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert len(objects) == 2 * len(SOURCES) and objects[0]["source"] == SOURCES[0] and objects[1]["rank"] == 1


def test_api_returns_strings_or_hypotheses(run_dir):
    t = Translator.load(run_dir)
    assert t.translate(["le chat noir", ""], beam=1) == ["the black cat", ""]
    found = t.translate(["le chat noir"], DecodeOptions(beam=3, n_best=3), hypotheses=True)[0]
    assert len(found) == 3 and found[0].text == "the black cat" and found[0].score >= found[1].score
    assert (
        t.tokenizer.decode(found[0].ids) == found[0].text
        and "".join(found[0].tokens).replace("▁", " ").strip() == found[0].text
    )


def test_score_of_greedy_output_is_greedys_own_score_and_beam_scores_no_lower(run_dir, tmp_path):
    t = Translator.load(run_dir)
    greedy = t.translate(SOURCES, beam=1, hypotheses=True)
    forced = t.score(SOURCES, [h[0].text for h in greedy])
    for (total, _), hyps in zip(forced, greedy):
        assert total == pytest.approx(hyps[0].score, abs=1e-3)
    (tmp_path / "src").write_text("\n".join(SOURCES) + "\n")
    for name, flags in (("greedy", ["--greedy"]), ("beam", ["--beam", "5", "--length-penalty", "0"])):
        out = cli("mt.translate", "--model", str(run_dir), *flags, "--input", str(tmp_path / "src"))
        (tmp_path / name).write_text(out.stdout)
    scored = {}
    for name in ("greedy", "beam"):
        result = cli("mt.score", "--model", str(run_dir), "--src", str(tmp_path / "src"), "--tgt", str(tmp_path / name))
        assert result.returncode == 0, result.stderr
        scored[name] = [float(line.split("\t")[0]) for line in result.stdout.splitlines()]
        assert len(scored[name]) == len(SOURCES)
    assert scored["greedy"] == pytest.approx([h[0].score for h in greedy], abs=1e-3)
    assert all(b >= g - 1e-3 for b, g in zip(scored["beam"], scored["greedy"]))


def test_score_refuses_misaligned_files(run_dir, tmp_path):
    (tmp_path / "a").write_text("le chat\nle chien\n")
    (tmp_path / "b").write_text("the cat\n")
    result = cli("mt.score", "--model", str(run_dir), "--src", str(tmp_path / "a"), "--tgt", str(tmp_path / "b"))
    assert result.returncode == 2 and "2 lines but" in result.stderr and result.stderr.count("\n") == 1


def test_attention_picture_and_alignment(run_dir, tmp_path):
    png = tmp_path / "attention.png"
    result = cli("mt.translate", "--model", str(run_dir), "--greedy", "--attention", str(png), "le chat noir")
    assert result.returncode == 0, result.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    aligned = cli("mt.translate", "--model", str(run_dir), "--greedy", "--alignment", "le chat noir", "le chien blanc")
    for line, source in zip(aligned.stdout.splitlines(), ["le chat noir", "le chien blanc"]):
        text, links = line.split(" ||| ")
        pairs = [tuple(map(int, p.split("-"))) for p in links.split()]
        assert all(0 <= i < len(source.split()) and 0 <= j < len(text.split()) for i, j in pairs)
        assert {j for _, j in pairs} == set(range(len(text.split())))  # every output word is linked
    two = cli("mt.translate", "--model", str(run_dir), "--attention", str(png), "a", "b")
    assert two.returncode == 2 and "one sentence" in two.stderr


def test_an_ensemble_of_one_model_twice_is_that_model(run_dir, tmp_path):
    single = cli("mt.translate", "--model", str(run_dir), "--beam", "3", *SOURCES)
    double = cli("mt.translate", "--model", str(run_dir), "--model", str(run_dir), "--beam", "3", *SOURCES)
    assert double.returncode == 0 and double.stdout == single.stdout
    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    from mt.data.tokenizer import SentencePieceTokenizer

    words = "un deux trois quatre cinq six sept huit neuf dix onze douze treize quatorze quinze seize vingt cent mille"
    words = words.split()
    text = [" ".join(words[i:] + words[:i]) for i in range(len(words))] * 20
    SentencePieceTokenizer.train(text, vocab_size=39).save(other)  # the same size, other pieces
    refused = cli("mt.translate", "--model", str(run_dir), "--model", str(other), "le chat")
    assert refused.returncode == 2 and "another vocabulary" in refused.stderr


def test_a_checkpoint_that_does_not_fit_its_tokenizer_is_a_one_line_error(run_dir, tmp_path):
    from mt.data.tokenizer import SentencePieceTokenizer

    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    SentencePieceTokenizer.train(["un deux trois quatre cinq six sept"] * 50, vocab_size=20).save(other)
    result = cli("mt.translate", "--model", str(other), "le chat")
    assert result.returncode == 2 and "does not fit" in result.stderr and result.stderr.count("\n") == 1


@pytest.fixture(scope="module")
def translator(run_dir):
    return Translator.load(run_dir)


def test_the_python_api_takes_any_string_and_refuses_bad_options_in_one_line(translator):
    """Property test: any Python string (lone surrogates, NUL, control characters included)
    translates to one string; a non-finite or out-of-range option is a UserError, nothing worse."""
    hypothesis = pytest.importorskip("hypothesis", reason="the dev extra is not installed")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=40, deadline=None)
    @hypothesis.given(st.lists(st.text(alphabet=st.characters(), max_size=30), min_size=1, max_size=4))
    def any_text(sentences):
        out = translator.translate(sentences, beam=1, max_len=8)
        assert len(out) == len(sentences) and all(isinstance(t, str) for t in out)

    @hypothesis.settings(max_examples=40, deadline=None)
    @hypothesis.given(
        st.sampled_from(["length_penalty", "temperature", "top_p", "beam", "seed"]),
        st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**70), 2**70)),
    )
    def any_option(name, value):
        try:
            out = translator.translate(["le chat noir"], **{name: value, "max_len": 8})
        except UserError as e:
            assert "\n" not in str(e)
        else:
            assert isinstance(out[0], str)

    any_text()
    any_option()


def test_batches_decoded_side_by_side_give_the_outputs_of_one_at_a_time(translator):
    """Workers split the intra-op threads: with one thread in all, every batch runs on one thread
    either way, so the hypotheses and their scores must be equal to the last bit. The setting of
    threads comes back after the workers are done, and a sampling seed still gives one answer."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for options in (DecodeOptions(beam=1), DecodeOptions(beam=3, n_best=2)):
            alone = translator.translate(SOURCES, options, batch_size=2, workers=1, hypotheses=True)
            side_by_side = translator.translate(SOURCES, options, batch_size=2, workers=3, hypotheses=True)
            assert [[(h.ids, h.score) for h in n] for n in alone] == [
                [(h.ids, h.score) for h in n] for n in side_by_side
            ]
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    sample = DecodeOptions(beam=1, temperature=1.0, seed=5)
    draws = [translator.translate(SOURCES, sample, batch_size=2, workers=workers) for workers in (1, 3)]
    assert draws[0] == draws[1]
    assert torch.get_num_threads() == threads


def test_a_failing_batch_stops_the_workers_with_its_error():
    calls = []

    def decode(batch):
        calls.append(batch)
        if batch == 1:
            raise ValueError("batch 1 failed")
        time.sleep(0.05)  # the others take a while, as real batches do
        return batch

    with pytest.raises(ValueError, match="batch 1 failed"):
        map_batches(decode, list(range(50)), workers=2)
    assert len(calls) < 50  # the batches not yet started were dropped
    assert map_batches(lambda b: b * 2, [1, 2, 3], workers=2) == [2, 4, 6]


def test_the_costliest_batches_start_first_and_results_keep_their_order():
    started = []

    def decode(batch):
        started.append(batch)
        time.sleep(0.02)
        return -batch

    batches = [1, 5, 3, 9]
    assert map_batches(decode, batches, workers=2, cost=lambda b: b) == [-1, -5, -3, -9]
    assert set(started[:2]) == {9, 5} and set(started[2:]) == {3, 1}


def test_a_beam_wider_than_half_the_vocabulary_still_searches(translator):
    """Beam search's first step runs once per sentence, so it sees one beam's pieces: with twice
    the beam more than the vocabulary (39 pieces here) there are fewer candidates than it keeps.
    Every output still comes, its n-best list sorted, the best never below greedy's log-probability."""
    assert translator.tokenizer.vocab_size < 40
    greedy = translator.translate(SOURCES, beam=1, length_penalty=0.0, hypotheses=True)
    for beam in (20, 30):
        found = translator.translate(SOURCES, beam=beam, n_best=3, length_penalty=0.0, hypotheses=True)
        for hyps, g in zip(found, greedy):
            scores = [h.score for h in hyps]
            assert len(hyps) == 3 and all(isinstance(h.text, str) for h in hyps)
            assert scores == sorted(scores, reverse=True) and scores[0] >= g[0].score - 1e-3


def test_decoding_batches_are_bounded_in_padded_tokens_and_cover_every_sentence_once(translator):
    """Long sentences come fewer to a batch, so a batch's caches (sentences x length) stay bounded."""
    from mt.inference.translator import BATCH_TOKENS, token_bounded

    assert list(token_bounded(list("abcdef"), [1, 2, 3, 4, 5, 6], 3, 12)) == [["a", "b", "c"], ["d", "e"], ["f"]]
    assert list(token_bounded(["long"], [50], 8, 10)) == [["long"]]  # one too long for the bound still goes
    encoded = [[5] * n for n in [3, 200, 8, 120, 1, 40] * 30]
    batches = list(translator.batches(encoded, 64))
    seen = sorted(i for rows, _ in batches for i in rows)
    assert seen == list(range(len(encoded)))
    assert all(src.shape[0] <= 64 and (src.numel() <= BATCH_TOKENS or src.shape[0] == 1) for _, src in batches)
    assert max(src.shape[0] for _, src in batches) == 64  # short sentences still fill a batch

"""The lexical shortlist: learned from pairs, saved and loaded safely, and used by greedy and beam
search on a CPU (fp32 and int8) without changing what the whole vocabulary would give where it
holds the outputs' pieces; an imported Marian model takes one learned from files."""

import shutil

import pytest
import torch
from helpers import COLOURS, WORDS, cli, synthetic_corpus
from random_marian import ENGLISH, FRENCH, build, sentences

from mt.data.vocab import SPECIALS
from mt.decode_options import DecodeOptions
from mt.errors import UserError
from mt.importers.marian import import_marian
from mt.inference.shortlist import SHORTLIST_FILE, Shortlist, learn_shortlist, load_shortlist
from mt.inference.translator import Translator

SOURCES = [f"le {n} {c}" for n in WORDS for c in COLOURS]
TARGETS = [f"the {COLOURS[c]} {WORDS[n]}" for n in WORDS for c in COLOURS]


@pytest.fixture
def run(run_dir, tmp_path):
    """A copy of the session's trained run: the shortlists written here stay here."""
    return shutil.copytree(run_dir, tmp_path / "run")


def only(translator: Translator, words: str) -> Shortlist:
    """A shortlist that allows the specials and the pieces of `words`, whatever the source."""
    ids = sorted(set(translator.tokenizer.encode(words, "tgt")))
    vocab = translator.vocab
    return Shortlist(torch.full((vocab, 1), ids[0]), torch.tensor(ids), vocab, translator.tokenizer.fingerprint())


def everything(translator: Translator) -> Shortlist:
    vocab = translator.vocab
    return Shortlist(torch.arange(vocab).repeat(vocab, 1), torch.tensor([], dtype=torch.long), vocab, "")


def hypotheses(translator, options, sources=SOURCES):
    found = translator.translate(sources, options, hypotheses=True)
    return [[(h.text, round(h.score, 4)) for h in hyps] for hyps in found]


@pytest.mark.parametrize("options", [DecodeOptions(beam=1), DecodeOptions(beam=3, n_best=2)])
def test_a_shortlist_of_every_id_changes_nothing(run_dir, options):
    translator = Translator.load(run_dir)
    whole = hypotheses(translator, options)
    translator.shortlist = everything(translator)
    assert hypotheses(translator, options) == whole
    assert hypotheses(translator, options.replace(shortlist=False)) == whole


def test_learning_keeps_each_sources_translations_first():
    # source 5 always comes with target 8, 6 with 9, 7 with 10
    shortlist = learn_shortlist([[5, 6], [5, 7], [6]], [[8, 9], [8, 10], [9]], 12, 12, "fp", per_source=1, frequent=1)
    assert shortlist.table[5, 0] == 8 and shortlist.table[6, 0] == 9 and shortlist.table[7, 0] == 10
    assert shortlist.frequent.tolist() == [8] or shortlist.frequent.tolist() == [9]  # both occur twice
    assert shortlist.allowed(torch.tensor([[7, 0]])).tolist() == [*range(len(SPECIALS)), shortlist.frequent.item(), 10]


def test_the_learned_shortlist_holds_the_reference_targets(run_dir):
    tokenizer = Translator.load(run_dir).tokenizer
    src, tgt = tokenizer.encode_batch(SOURCES), tokenizer.encode_batch(TARGETS, "tgt")
    vocab = tokenizer.vocab_size
    shortlist = learn_shortlist(src, tgt, vocab, vocab, "fp", per_source=3, frequent=8)
    for s, t in zip(src, tgt):
        allowed = set(shortlist.allowed(torch.tensor([s])).tolist())
        assert set(t) <= allowed
        assert len(allowed) < vocab  # and not everything
    assert shortlist.table.shape == (vocab, 3)


def test_a_learned_shortlist_keeps_greedy_outputs(run, tmp_path):
    spec_folder = tmp_path / "corpus"
    spec_folder.mkdir()
    synthetic_corpus(spec_folder, 400)
    made = cli(
        "mt.shortlist", str(run), "--src", str(spec_folder / "c.fr"), "--tgt", str(spec_folder / "c.en"),
        "--per-source", "3", "--frequent", "8",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert (run / SHORTLIST_FILE).is_file() and "shortlist" in made.stderr
    translator = Translator.load(run)
    assert translator.shortlist is not None and translator.shortlist.table.shape[1] == 3
    whole = translator.translate(SOURCES, beam=1, shortlist=False)
    short = translator.translate(SOURCES, beam=1)
    # a restriction changes a greedy pick only where the whole vocabulary's best piece is left out
    assert sum(a == b for a, b in zip(whole, short)) >= 0.95 * len(SOURCES)
    assert sum(a == b for a, b in zip(short, TARGETS)) >= 0.9 * len(SOURCES)


@pytest.mark.parametrize("quantize", [None, "int8"])
@pytest.mark.parametrize("options", [DecodeOptions(beam=1), DecodeOptions(beam=3, n_best=3)])
def test_ids_outside_the_shortlist_are_never_produced(run, quantize, options):
    translator = Translator.load(run, quantize=quantize)
    assert translator.translate(["le chat noir"], options, shortlist=False) == ["the black cat"]
    translator.shortlist = only(translator, "the black dog small")
    allowed = set(translator.shortlist.allowed(torch.tensor([[0]])).tolist())
    found = translator.translate(SOURCES, options, hypotheses=True)
    assert all(set(h.ids) <= allowed for hyps in found for h in hyps)
    assert sum(bool(h.ids) for hyps in found for h in hyps) >= len(SOURCES)  # not all empty
    assert "cat" not in translator.translate(["le chat noir"], options)[0]


def test_int8_with_every_id_gives_int8s_outputs(run_dir):
    translator = Translator.load(run_dir, quantize="int8")
    whole = translator.translate(SOURCES, beam=1)
    translator.shortlist = everything(translator)
    # the output layer's rows are dequantized to float: numbers move a little, picks hardly
    assert sum(a == b for a, b in zip(whole, translator.translate(SOURCES, beam=1))) >= 0.9 * len(SOURCES)


def test_sampling_forced_scoring_and_glossaries_use_the_whole_vocabulary(run, tmp_path):
    translator = Translator.load(run)
    scores = translator.score(["le chat noir"], ["the black cat"])
    translator.shortlist = only(translator, "the black dog")
    assert translator.score(["le chat noir"], ["the black cat"]) == scores
    sampled = translator.translate(["le chat noir"] * 8, temperature=1.0, seed=3, hypotheses=True)
    whole = translator.translate(["le chat noir"] * 8, temperature=1.0, seed=3, hypotheses=True, shortlist=False)
    assert [h[0].ids for h in sampled] == [h[0].ids for h in whole]
    translator.shortlist.save(run)
    (tmp_path / "terms.tsv").write_text("chat\tcat\n")
    glossary = cli("mt.translate", "--model", str(run), "--glossary", str(tmp_path / "terms.tsv"), "le chat noir")
    assert glossary.returncode == 0 and "cat" in glossary.stdout  # a term's pieces, whatever the shortlist


def test_no_shortlist_flag_and_option(run):
    translator = Translator.load(run)
    only(translator, "the black dog").save(run)
    with_it = cli("mt.translate", "--model", str(run), "--greedy", "le chat noir")
    without = cli("mt.translate", "--model", str(run), "--greedy", "--no-shortlist", "le chat noir")
    assert with_it.returncode == 0 and without.returncode == 0, with_it.stderr + without.stderr
    assert "cat" not in with_it.stdout and without.stdout == "the black cat\n"
    with pytest.raises(UserError, match="shortlist must be true or false"):
        DecodeOptions(shortlist="no")


def test_a_damaged_or_crafted_shortlist_is_one_line(run, tmp_path):
    translator = Translator.load(run)
    path = only(translator, "the black dog").save(run)
    fingerprint, vocab = translator.tokenizer.fingerprint(), translator.vocab
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    result = cli("mt.translate", "--model", str(run), "le chat")
    assert result.returncode == 2 and "damaged or not a shortlist" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    torch.save({"format": "mt-shortlist-1", "table": [1, 2]}, path)
    with pytest.raises(UserError, match="not a shortlist written by mt.shortlist"):
        load_shortlist(path, fingerprint, vocab)
    torch.save({"evil": torch.nn.Linear(2, 2)}, path)  # a pickle asking for a class
    with pytest.raises(UserError, match="objects other than tensors"):
        load_shortlist(path, fingerprint, vocab)
    Shortlist(torch.full((vocab, 1), vocab + 5), torch.tensor([4]), vocab, fingerprint).save(run)
    with pytest.raises(UserError, match="outside the vocabulary"):
        load_shortlist(path, fingerprint, vocab)
    with pytest.raises(UserError, match="another tokenizer"):
        load_shortlist(path, "other", vocab)


def test_the_command_wants_corpora_for_a_run_without_them(tmp_path):
    build(tmp_path / "hf")
    run = import_marian(str(tmp_path / "hf"), tmp_path / "run", ("fr", "en"))
    refused = cli("mt.shortlist", str(run))
    assert refused.returncode == 2 and "--src FILE --tgt FILE" in refused.stderr
    (tmp_path / "s.fr").write_text("\n".join(sentences(FRENCH, 300, 5)) + "\n")
    (tmp_path / "s.en").write_text("\n".join(sentences(ENGLISH, 300, 6)) + "\n")
    made = cli("mt.shortlist", str(run), "--src", str(tmp_path / "s.fr"), "--tgt", str(tmp_path / "s.en"),
               "--per-source", "4", "--frequent", "3")  # fmt: skip
    assert made.returncode == 0, made.stderr
    translator = Translator.load(run)
    sources = sentences(FRENCH, 20, 9)
    for source in sources:  # one a batch: each output within its own sentence's shortlist
        (hyp,) = translator.translate([source], beam=2, hypotheses=True)[0]
        _, src = next(translator.batches(translator.encode([source]), 1))
        assert set(hyp.ids) <= set(translator.shortlist.allowed(src).tolist())
    assert len(translator.shortlist.allowed(src)) < translator.vocab


def test_a_server_request_and_flag_turn_it_off(run):
    """The server loads the run with its shortlist on, or off under --no-shortlist; a request's
    "shortlist": false turns it off for that request alone."""
    from mt.serve import parse_args
    from mt.serving.app import model_sets
    from mt.serving.requests import Limits, from_mapping
    from mt.serving.service import Service

    only(Translator.load(run), "the black dog").save(run)
    loaded = {}
    for flags in ([], ["--no-shortlist"]):
        args = parse_args(["--model", str(run), *flags])
        service = Service(model_sets(args), args, Limits())
        service._load()  # as the server loads its pairs when it starts
        assert service.ready, service.error
        loaded[bool(flags)] = service.pairs[("fr", "en")].translator
    on, off = loaded[False], loaded[True]
    assert on.options.shortlist is not False and off.options.shortlist is False
    assert "cat" not in on.translate(["le chat noir"], beam=1)[0]
    assert off.translate(["le chat noir"], beam=1) == ["the black cat"]
    asked_off = from_mapping({"shortlist": False}, on.options)
    assert on.translate(["le chat noir"], asked_off, beam=1) == ["the black cat"]


def test_a_catalog_corpus_gives_the_pairs_to_learn_from(mirror):
    from mt.config import load_config
    from mt.inference.shortlist import training_pairs

    sources, targets = training_pairs(load_config("recipes/multi30k.yaml"), 50, ["multi30k"])
    assert len(sources) == len(targets) == 50
    assert all(s.strip() and t.strip() for s, t in zip(sources, targets))

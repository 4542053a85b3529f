"""The parallel loader: bad files fail loudly, filters count what they drop, batches cover each pair once."""

import gzip
import io
import threading
import time

import numpy as np
import pytest

from mt.data.batching import prefetch, token_batches
from mt.data.corpora import (
    EncodedCorpus,
    columns,
    encode_pairs,
    load_corpora,
    load_pairs,
)
from mt.data.tokenizer import CharTokenizer
from mt.errors import UserError


def text_spec(tmp_path, fr_lines, en_lines):
    (tmp_path / "c.fr").write_bytes(
        fr_lines if isinstance(fr_lines, bytes) else "".join(line + "\n" for line in fr_lines).encode()
    )
    (tmp_path / "c.en").write_bytes(
        en_lines if isinstance(en_lines, bytes) else "".join(line + "\n" for line in en_lines).encode()
    )
    return {"path": "text", "data_files": {"fr": str(tmp_path / "c.fr"), "en": str(tmp_path / "c.en")}}


def test_misaligned_files_are_an_error(tmp_path):
    spec = text_spec(tmp_path, ["un", "deux", "trois"], ["one", "two"])
    with pytest.raises(UserError, match="has 3 lines but .* has 2"):
        load_pairs(spec, "train", "fr", "en")


def test_invalid_utf8_names_file_and_line(tmp_path):
    spec = text_spec(tmp_path, b"un\ndeux\ntr\xe9s\n", b"one\ntwo\nthree\n")
    with pytest.raises(UserError, match=r"c\.fr line 3: invalid UTF-8"):
        load_pairs(spec, "train", "fr", "en")


def test_gzip_and_column_specs(tmp_path):
    with gzip.open(tmp_path / "a.fr.gz", "wt") as f:
        f.write("bonjour\nmerci\n")
    with gzip.open(tmp_path / "a.en.gz", "wt") as f:
        f.write("hello\nthanks\n")
    gz = {"path": "text", "data_files": {"fr": str(tmp_path / "a.fr.gz"), "en": str(tmp_path / "a.en.gz")}}
    (tmp_path / "p.tsv").write_text("english\tfrench\nhello\tbonjour\nyes\toui\n")
    tsv = {
        "path": "csv",
        "data_files": str(tmp_path / "p.tsv"),
        "delimiter": "\t",
        "columns": {"fr": "french", "en": "english"},
    }
    (tmp_path / "p.jsonl").write_text('{"translation": {"fr": "chat", "en": "cat"}}\n')
    js = {"path": "json", "data_files": str(tmp_path / "p.jsonl"), "field": "translation"}
    ds, repeats, _ = load_corpora([gz, tsv, {**js, "repeat": 3}], "train", "fr", "en")
    assert repeats.tolist() == [1, 1, 1, 1, 3]
    assert columns(ds, "src", "tgt") == [
        ["bonjour", "merci", "bonjour", "oui", "chat"],
        ["hello", "thanks", "hello", "yes", "cat"],
    ]
    with pytest.raises(UserError, match="no column 'fr'"):
        load_pairs({"path": "csv", "data_files": str(tmp_path / "p.tsv"), "delimiter": "\t"}, "train", "fr", "en")


def test_filters_count_empty_long_and_ratio(tmp_path):
    fr = ["court", "", "une phrase beaucoup trop longue pour passer", "abc", "ok"]
    en = ["short", "empty", "long", "a long reply here", ""]
    ds = load_pairs(text_spec(tmp_path, fr, en), "train", "fr", "en")
    tok = CharTokenizer.train(fr + en)
    log = io.StringIO()
    kept = EncodedCorpus(ds, tok, cache_dir=None, max_len=30, max_ratio=3.0, what="train", log=log)
    assert kept.all_texts("src") == ["court"] and len(kept) == 1
    assert log.getvalue().strip() == "train: 5 pairs, kept 1, dropped 4 (2 empty, 1 too long, 1 length ratio)"
    src, tgt = kept.ids(np.array([0]))
    assert src.values.tolist() == tok.encode("court") and tgt.lengths.tolist() == [len("short")]


def test_encoding_is_cached_and_split_across_processes(tmp_path):
    fr, en = [f"numéro {i}" for i in range(300)], [f"number {i}" for i in range(300)]
    ds = load_pairs(text_spec(tmp_path, fr, en), "train", "fr", "en")
    tok = CharTokenizer.train(fr + en)
    first = encode_pairs(ds, tok, tmp_path / "cache")
    files = list((tmp_path / "cache").glob("encoded-*.arrow"))
    assert len(files) == 1
    second = encode_pairs(ds, tok, tmp_path / "cache")
    assert second.cache_files[0]["filename"] == str(files[0]) and columns(second, "src_ids") == columns(
        first, "src_ids"
    )
    two = encode_pairs(ds, tok, tmp_path / "other", num_proc=2)
    assert len(two.cache_files) == 2  # one Arrow shard per process, read back in order
    assert columns(two, "src_ids", "tgt_len") == columns(first, "src_ids", "tgt_len")
    assert columns(first, "src_ids")[0][7] == tok.encode(fr[7])


def test_token_batches_respect_budget_and_cover_each_pair_once():
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(1, 60, 5000), rng.integers(1, 60, 5000)
    batches = token_batches(src, tgt, max_tokens=512, seed=1)
    for b in batches:
        assert len(b) * (max(src[b].max(), tgt[b].max()) + 1) <= 512
    assert sorted(np.concatenate(batches).tolist()) == list(range(5000))
    again = token_batches(src, tgt, max_tokens=512, seed=1)
    other_epoch = token_batches(src, tgt, max_tokens=512, seed=2)
    assert all((a == b).all() for a, b in zip(batches, again))
    assert [b.tolist() for b in batches] != [b.tolist() for b in other_epoch]
    padded = sum(len(b) * (max(src[b].max(), tgt[b].max()) + 1) for b in batches)
    assert padded < 1.1 * (np.maximum(src, tgt) + 1).sum()  # length buckets keep padding small


def test_sentencepiece_model_is_cached_by_content(tmp_path):
    from mt.config import load_config
    from mt.data.parallel import train_tokenizer

    fr = [f"le chat numéro {i} dort près de la fenêtre" for i in range(200)]
    en = [f"the cat number {i} sleeps near the window" for i in range(200)]
    cfg = load_config("recipes/multi30k.yaml", ["tokenizer.vocab_size=60"])
    pairs = load_pairs(text_spec(tmp_path, fr, en), "train", "fr", "en")
    first = train_tokenizer(cfg.tokenizer, pairs, 1, tmp_path / "cache")
    assert len(list((tmp_path / "cache").glob("spm-*.model"))) == 1
    reloaded = load_pairs(text_spec(tmp_path, fr, en), "train", "fr", "en")
    again = train_tokenizer(cfg.tokenizer, reloaded, 1, tmp_path / "cache")
    assert again.fingerprint() == first.fingerprint()
    other = load_config("recipes/multi30k.yaml", ["tokenizer.vocab_size=50"])
    train_tokenizer(other.tokenizer, pairs, 1, tmp_path / "cache")
    assert len(list((tmp_path / "cache").glob("spm-*.model"))) == 2  # settings are part of the key


def test_closing_the_prefetched_stream_stops_its_thread():
    """Training closes its batch stream on the way out; no prefetch thread may outlive it (one
    left inside torch or arrow code as the interpreter exits can abort the process)."""

    def slow_items():
        for i in range(1000):
            time.sleep(0.05)
            yield i

    stream = prefetch(slow_items())
    assert [next(stream) for _ in range(3)] == [0, 1, 2]
    stream.close()
    assert not any(t.name == "mt-prefetch" and t.is_alive() for t in threading.enumerate())


def test_newstest_from_the_mirror(mirror):
    """The WMT news test sets: one named set, and WMT's usual roles: training (2008-2011), validation
    (2012) and test (2013)."""
    valid = load_pairs("newstest", "valid", "fr", "en")
    assert len(valid) == 3003 and valid[0]["tgt"].startswith("Parliament Does Not Support Amendment")
    test = load_pairs("newstest", "test", "fr", "en")
    assert len(test) == 3000 and test[0]["tgt"].startswith("A Republican strategy")
    assert len(load_pairs("newstest:newstest2012", "train", "fr", "en")) == 3003
    assert len(load_pairs("newstest", "train", "fr", "en")) == 2051 + 502 + 2525 + 2489 + 3003


@pytest.mark.parametrize("lines", [["", "", ""], []], ids=["all empty", "no lines"])
def test_a_corpus_without_text_says_so_in_one_line(tmp_path, lines):
    from mt.config import load_config
    from mt.data.parallel import train_tokenizer

    cfg = load_config("recipes/multi30k.yaml", ["tokenizer.vocab_size=60"])
    ds = load_pairs(text_spec(tmp_path, lines, lines), "train", "fr", "en")
    with pytest.raises(UserError, match=r"data.train: .*(every line is empty|hold no pairs)"):
        train_tokenizer(cfg.tokenizer, ds, 1, tmp_path / "cache")


@pytest.mark.slow
def test_hansard_splits_from_the_mirror(mirror):
    """Training: both training parts; valid and test: 1,000 pairs at evenly spaced lines of the
    House and Senate testing parts, the same every time."""
    train = load_pairs("hansard", "train", "fr", "en")
    assert len(train) == 890_631 + 131_258
    valid, test = load_pairs("hansard", "valid", "fr", "en"), load_pairs("hansard:test", "train", "fr", "en")
    assert len(valid) == len(test) == 1000
    assert valid[0]["src"].startswith("HANSARD") or valid[0]["tgt"].startswith("EDITED HANSARD")
    assert load_pairs("hansard:valid", "test", "fr", "en")["tgt"] == valid["tgt"]
    with pytest.raises(UserError, match="hansard has the splits train, valid, test"):
        load_pairs("hansard:dev", "valid", "fr", "en")
    assert len(load_pairs("newstest:newsdiscusstest2015", "test", "fr", "en")) == 1500


def test_cleaning_counts_each_rule_through_the_loader(tmp_path):
    import io

    from mt.data.corpora import load_corpora

    pairs = [
        ("le chat ", " the cat"),  # stripped, kept
        ("le chat", "the cat"),  # a duplicate once stripped
        ("123 !", "123 !"),  # no letters
        ("Paris", "Paris"),  # source = target
        ("un chien", "a dog"),
        ("un chien", "a dog"),  # a duplicate
        ("une maison", "a house"),
    ]
    (tmp_path / "c.fr").write_text("".join(s + "\n" for s, _ in pairs))
    (tmp_path / "c.en").write_text("".join(t + "\n" for _, t in pairs))
    spec = {"path": "text", "data_files": {"fr": str(tmp_path / "c.fr"), "en": str(tmp_path / "c.en")}}
    log = io.StringIO()
    train, repeats, _ = load_corpora(
        [spec, {**spec, "repeat": 2}], "train", "fr", "en", clean=True, dedup=True, log=log
    )
    assert train["src"] == ["le chat", "un chien", "une maison"] * 2 and train["tgt"][0] == "the cat"
    assert repeats.tolist() == [1, 1, 1, 2, 2, 2]
    said = log.getvalue()
    assert "train c: cleaning 7 pairs kept 3 (1 stripped, 1 no letters, 1 source = target, 2 duplicates)" in said
    untouched, *_ = load_corpora([spec], "train", "fr", "en")
    assert len(untouched) == 7 and untouched["src"][0] == "le chat "
    only_dedup, *_ = load_corpora([spec], "train", "fr", "en", dedup=True, log=None)
    assert len(only_dedup) == 6  # without clean, "le chat " and "le chat" differ


def test_no_validation_or_test_source_is_trained_on(tmp_path):
    """A training pair whose source is a validation or test sentence (whitespace and case aside)
    is dropped, whichever set names it, and the log counts it; the validation set stays whole."""
    import io

    from mt.config import load_config
    from mt.data.parallel import prepare_parallel

    fr = [f"le chat numéro {i} dort près de la fenêtre" for i in range(300)]
    en = [f"the cat number {i} sleeps near the window" for i in range(300)]
    for folder in ("train", "valid", "test"):
        (tmp_path / folder).mkdir()
    train = text_spec(
        tmp_path / "train", fr + ["Le  CHAT numéro 1000 dort", "le chien numéro 7 court"], en + ["x", "y"]
    )
    valid = text_spec(
        tmp_path / "valid", ["le chat numéro 1000 dort", "un autre chat dort"], ["the cat 1000 sleeps", "a cat sleeps"]
    )
    test = text_spec(tmp_path / "test", ["Le chien numéro 7 court"], ["the dog number 7 runs"])
    cfg = load_config("recipes/multi30k.yaml", ["tokenizer.vocab_size=60"])
    cfg.data.train, cfg.data.valid, cfg.data.test = [train], valid, [test]
    log = io.StringIO()
    data = prepare_parallel(cfg.data, cfg.tokenizer, 1, None, log)
    said = log.getvalue()
    assert "train c: 2 pairs dropped, their source in a validation or test set" in said, said
    assert data.train.pairs["src"] == fr and len(data.valid_sets[0].sources) == 2

"""A glossary enforced by constrained beam search: the file and its one-line errors, the matching,
the constraint bookkeeping, and the search itself on the tiny model (which says "the black cat"
for "le chat noir": a term makes it say what it would not), through the API and the command (the
server's routes: tests/serving/test_serve.py; the CTranslate2 engine's refusal: test_ctranslate2.py)."""

import json

import pytest
from helpers import cli

from mt.errors import UserError
from mt.glossary import Glossary, read_glossary
from mt.inference.constraints import Constraints, Progress, word_continuations


def glossary_file(tmp_path, text: str, name="terms.tsv"):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def test_a_glossary_file_holds_terms_comments_variants_and_multi_word_terms(tmp_path):
    path = glossary_file(tmp_path, "# nos termes\n\nchat\tdog\nchat noir\tblack dog|dark dog\nFirefox\tFirefox\n")
    g = read_glossary(path)
    assert [(t.source, t.targets) for t in g.terms] == [
        ("chat noir", ("black dog", "dark dog")),
        ("Firefox", ("Firefox",)),
        ("chat", ("dog",)),
    ]


@pytest.mark.parametrize(
    "content, message",
    [
        ("chat\n", "line 1: expected 'source term<TAB>target term'"),
        ("chat\tdog\nnoir\t\n", "line 2: expected"),
        ("a\tb\tc\n", "line 1: expected"),
        (b"chat\tdog\nchien\t\xff\n", "line 2: not UTF-8 text"),
        ("# nothing\n\n", "holds no terms"),
    ],
)
def test_a_malformed_glossary_file_is_one_line_naming_what_and_where(tmp_path, content, message):
    with pytest.raises(UserError, match=message) as caught:
        read_glossary(glossary_file(tmp_path, content))
    assert "\n" not in str(caught.value)


def test_terms_match_whole_words_case_insensitively_longest_first():
    g = Glossary.of([("chat", "dog"), ("chat noir", "black dog"), ("C++", "C++"), ("homme", "guy")])
    found = g.find("Le Chat noir, le chat. Un chaton, un HOMME et du c++ ; hommes")
    assert [t.source for t in found] == ["chat noir", "chat", "homme", "C++"]


def test_a_constraint_is_continued_abandoned_met_and_not_met_by_a_longer_word():
    c = Constraints([((5, 6),), ((7,), (7, 8))])  # a two-token term; a term with variants "x" and "x y"
    p = c.advance(Progress(), 5)
    assert (p.within, p.at, c.bank(p)) == (0, 1, 1)
    assert c.advance(p, 9) == Progress()  # another token abandons it
    met = c.advance(p, 6)
    assert met.met == 1 and c.bank(met) == 2 and c.advance(met, 9).met == 1
    assert c.advance(met, 9, continues=True).met == 0  # 5 6 then a piece of the same word: a longer word
    short = c.advance(Progress(), 7)
    assert short.met == 2 and short.within == 1  # "x" met, "x y" still possible
    assert c.advance(short, 8).met == 2 and c.advance(short, 8, continues=True).met == 2  # "x y" met
    assert c.advance(short, 9, continues=True).met == 0 and c.need == 3
    assert sorted(c.advancing(Progress())) == [5, 7]
    assert word_continuations(["<pad>", "\u2581cat", "s", ".", "at"]).tolist() == [False, False, True, False, True]


def translate(run_dir, sentences, terms, **options):
    from mt.inference.translator import Translator

    return Translator.load(run_dir).translate(sentences, glossary=Glossary.of(terms), **options)


def test_a_term_goes_where_the_model_would_not_put_it_and_other_sentences_are_left_alone(run_dir):
    from mt.inference.translator import Translator

    plain = Translator.load(run_dir).translate(["le chat noir", "le chien blanc"])
    assert plain == ["the black cat", "the white dog"]
    assert translate(run_dir, ["le chat noir", "le chien blanc"], [("chat", "dog")]) == ["the black dog", plain[1]]
    two = translate(run_dir, ["le chat noir"], [("chat", "dog"), ("noir", "white")])[0]
    assert "white" in two.split() and "dog" in two.split() and "cat" not in two
    assert translate(run_dir, ["le chat noir"], [("chat", "small dog")]) == ["the small dog"]  # a multi-word term
    assert translate(run_dir, ["le chat noir"], [("chat", "chat")]) == ["the black chat"]  # not translated


def test_the_search_holds_with_the_cache_off_int8_an_ensemble_documents_and_greedy(run_dir, capsys):
    from mt.inference.documents import translate_lines
    from mt.inference.translator import Translator

    terms = [("chat", "dog")]
    assert translate(run_dir, ["le chat noir"], terms, use_cache=False) == ["the black dog"]
    for translator in (Translator.load(run_dir, quantize="int8"), Translator.load([run_dir, run_dir])):
        assert translator.translate(["le chat noir"], glossary=Glossary.of(terms)) == ["the black dog"]
    translator = Translator.load(run_dir)
    options = translator.options.replace(glossary=Glossary.of(terms))
    assert translate_lines(translator, ["Le chat noir. Le chien blanc."], options).lines[0].count("dog") == 2
    greedy = translator.translate(["le chat noir"] * 2, options, beam=1)
    assert greedy == ["the black dog"] * 2 and capsys.readouterr().err.count("more beams than greedy has") == 1


def test_a_term_the_vocabulary_cannot_write_is_said_once_and_the_translation_goes_on(run_dir, capsys):
    from mt.inference.translator import Translator

    plain = Translator.load(run_dir).translate(["le chat noir", "le chat"])
    assert translate(run_dir, ["le chat noir", "le chat"], [("chat", "Ωmega")]) == plain
    assert capsys.readouterr().err.count("'chat' -> 'Ωmega' has pieces this model's vocabulary lacks") == 1


def test_the_command_takes_a_glossary_and_refuses_a_bad_one_in_one_line(run_dir, tmp_path):
    good = glossary_file(tmp_path, "chat\tdog\n")
    done = cli("mt.translate", "--model", str(run_dir), "--glossary", str(good), "le chat noir", "le chien blanc")
    assert done.returncode == 0 and done.stdout == "the black dog\nthe white dog\n", done.stderr
    bad = glossary_file(tmp_path, "chat dog\n", "bad.tsv")
    refused = cli("mt.translate", "--model", str(run_dir), "--glossary", str(bad), "le chat noir")
    assert refused.returncode == 2 and "bad.tsv, line 1" in refused.stderr and len(refused.stderr.splitlines()) == 1
    (tmp_path / "s.fr").write_text("le chat noir\n")
    (tmp_path / "s.en").write_text("the black dog\n")
    scored = cli("mt.evaluate", "--model", str(run_dir), "--glossary", str(good), "--src", str(tmp_path / "s.fr"),
                 "--ref", str(tmp_path / "s.en"), "--json")  # fmt: skip
    assert scored.returncode == 0 and json.loads(scored.stdout)["chrf"] == 100.0, scored.stderr


def test_a_glossary_constrains_search_not_sampling():
    from mt.decode_options import DecodeOptions

    with pytest.raises(UserError, match="not sampling"):
        DecodeOptions(beam=1, temperature=0.8, glossary=Glossary.of([("chat", "dog")]))

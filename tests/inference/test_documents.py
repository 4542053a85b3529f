"""Documents: lines cut into sentences, long sentences cut at clauses, everything translated and
joined back line for line (mt/inference/documents.py), in the API, the command and the evaluator."""

import json
from types import SimpleNamespace

import pytest
from helpers import cli

from mt.inference.documents import cut_lines, join_lines, lines_of, sentence_splitter, texts_of, translate_lines

CLAUSES = [f"la clause numéro {i} dit quelque chose" for i in range(60)]
LONG_SENTENCE = ", ".join(CLAUSES) + "."  # 360 words: over three times the model's 100 tokens


class Echo:
    """A stand-in translator: one token a word, at most 100 a sentence; it "translates" by upper
    case, so what reaches it and what comes back can be read."""

    max_src_tokens = 100
    cfg = SimpleNamespace(data=SimpleNamespace(src_lang="fr", tgt_lang="en"))
    tokenizer = SimpleNamespace(encode=lambda text: text.split())

    def __init__(self):
        self.seen = []

    def translate(self, sentences, options=None, batch_size=64, **_):
        assert all(len(s.split()) <= self.max_src_tokens for s in sentences), "a piece over the model's limit"
        self.seen += sentences
        return [s.upper() for s in sentences]


def test_sentences_are_cut_translated_and_joined_back_line_for_line():
    lines = ["Le chat dort. Le chien aboie! Où est-il ?", "", "  Une seule phrase.  ", "M. Dupont arrive."]
    echo = Echo()
    done = translate_lines(echo, lines, None)
    assert echo.seen == ["Le chat dort.", "Le chien aboie!", "Où est-il ?", "Une seule phrase.", "M. Dupont arrive."]
    assert done.lines == ["LE CHAT DORT. LE CHIEN ABOIE! OÙ EST-IL ?", "", "  UNE SEULE PHRASE.  ", "M. DUPONT ARRIVE."]
    assert (done.sentences, done.long_sentences) == (5, 0)
    whole = translate_lines(Echo(), lines, None, split=False)
    assert whole.lines == [line.upper() for line in lines] and whole.sentences == 3


def test_a_sentence_longer_than_the_model_is_cut_at_clauses_and_nothing_is_lost():
    echo = Echo()
    done = translate_lines(echo, [LONG_SENTENCE], None)
    assert (done.sentences, done.long_sentences, done.long_lines) == (1, 1, [0]) and len(echo.seen) >= 4
    assert echo.seen == [clause + ("," if i < len(CLAUSES) - 1 else ".") for i, clause in enumerate(CLAUSES)]
    out = done.lines[0]
    at = 0
    for clause in CLAUSES:  # every clause, in order
        at = out.index(clause.upper(), at) + 1
    assert " ".join(echo.seen) == LONG_SENTENCE and len(out) == len(LONG_SENTENCE)


def test_a_paragraph_of_five_thousand_characters_is_translated_in_full():
    sentences = [f"Le {i}e invité arrive, salue la salle et s'assoit près de la fenêtre." for i in range(80)]
    paragraph = " ".join(sentences)
    assert len(paragraph) > 5000
    echo = Echo()
    done = translate_lines(echo, [paragraph], None)
    assert echo.seen == sentences and done.lines == [paragraph.upper()]


def test_without_clause_marks_a_long_sentence_is_cut_at_word_boundaries():
    words = " ".join(f"mot{i}" for i in range(250))
    pieces, cuts, long_lines = cut_lines([words], "fr", 100, lambda text: len(text.split()))
    assert long_lines == [0] and all(len(p.split()) <= 100 for p in pieces) and " ".join(pieces) == words
    assert join_lines(pieces, cuts) == [words]


def test_a_target_tag_goes_with_every_sentence_and_piece_of_its_line():
    """A multilingual model reads its target language from a tag at the start of the source: each
    sentence and each piece of a long one must carry it, and it counts toward the limit."""
    echo = Echo()
    done = translate_lines(echo, [">>fra<< Le chat dort. Le chien aboie!", f">>deu<< {LONG_SENTENCE}"], None)
    assert echo.seen[:2] == [">>fra<< Le chat dort.", ">>fra<< Le chien aboie!"]
    pieces = echo.seen[2:]
    assert len(pieces) >= 4 and all(p.startswith(">>deu<< ") and len(p.split()) <= 100 for p in pieces)
    assert " ".join(p.removeprefix(">>deu<< ") for p in pieces) == LONG_SENTENCE
    assert done.lines[0] == ">>FRA<< LE CHAT DORT. >>FRA<< LE CHIEN ABOIE!" and done.long_lines == [1]


def test_text_without_spaces_is_cut_at_the_token_limit_and_nothing_is_lost():
    """One token a character, at most 100: a sentence of 350 characters with no space and no
    clause mark is cut at the limit; one with full-width commas is cut after them."""
    count = len
    unbroken = "我们的模型读取这段没有空格的文本" * 22
    pieces, cuts, long_lines = cut_lines([unbroken], "zh", 100, count)
    assert long_lines == [0] and len(pieces) == 4 and all(len(p) <= 100 for p in pieces)
    assert "".join(pieces) == unbroken and join_lines(pieces, cuts, "zh") == [unbroken]
    clauses = "，".join(["这是一个很长的分句"] * 40) + "。"
    pieces, cuts, _ = cut_lines([clauses], "zh", 100, count)
    assert all(len(p) <= 100 for p in pieces) and all(p.endswith(("，", "。")) for p in pieces)
    assert "".join(pieces) == clauses and join_lines(pieces, cuts, "ja") == [clauses]
    assert cuts[0].offsets[0] == (0, len(pieces[0])) and cuts[0].offsets[-1][1] == len(clauses)


def test_blank_lines_come_back_as_they_went_in_and_the_target_language_joins_sentences():
    lines = ["   ", "\t", "", " Le chat dort. Le chien aboie! "]
    done = translate_lines(Echo(), lines, None)
    assert done.lines == ["   ", "\t", "", " LE CHAT DORT. LE CHIEN ABOIE! "]
    pieces, cuts, _ = cut_lines(["Le chat dort. Le chien aboie!"], "fr", 100, lambda text: len(text.split()))
    assert join_lines(["猫が寝ている。", "犬が吠える！"], cuts, "ja") == ["猫が寝ている。犬が吠える！"]
    assert join_lines(["猫在睡觉。", "狗在叫！"], cuts, "zh-Hans") == ["猫在睡觉。狗在叫！"]
    assert join_lines(["The cat sleeps.", "The dog barks!"], cuts, "en") == ["The cat sleeps. The dog barks!"]


def test_texts_with_line_breaks_are_lines_and_come_back_with_them():
    lines, counts = lines_of(["Le chat.\nLe chien.", "seul", "a\n\nb\n"])
    assert lines == ["Le chat.", "Le chien.", "seul", "a", "", "b", ""] and counts == [2, 1, 4]
    assert texts_of([line.upper() for line in lines], counts) == ["LE CHAT.\nLE CHIEN.", "SEUL", "A\n\nB\n"]


def test_a_language_the_moses_lists_lack_is_segmented_all_the_same():
    assert sentence_splitter("ja")("今日は晴れです。明日は雨です。") == ["今日は晴れです。", "明日は雨です。"]
    assert sentence_splitter("en")("Mr. Smith came. He left.") == ["Mr. Smith came.", "He left."]


def test_the_command_translates_a_long_paragraph_in_full_and_says_how_many_sentences_it_cut(run_dir, tmp_path):
    paragraph = ", ".join(["le chat noir", "le chien blanc", "le homme rouge", "le petit enfant"] * 82)
    assert len(paragraph) > 5000  # one sentence of thousands of tokens
    (tmp_path / "in.fr").write_text(f"{paragraph}\n\n  le chat noir  \n")
    result = cli("mt.translate", "--model", str(run_dir), "--input", str(tmp_path / "in.fr"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[2].startswith("  the ") and lines[2].endswith("  ")
    assert len(lines[0]) >= 0.5 * len(paragraph)
    assert "1 of 2 sentences were longer than the model takes (100 tokens)" in result.stderr


def test_the_command_splits_a_paragraph_and_joins_it_back_unless_told_not_to(run_dir):
    """Three capitalised sentences (the Moses splitter does not split before a lower-case letter):
    by default each is translated on its own and the three joined on one line; with --no-split the
    model reads the paragraph as one sentence, which a model of three-word sentences cuts short."""
    sentences = ["Le chat noir.", "Le chien blanc.", "Le homme rouge."]
    model = ["--model", str(run_dir), "--greedy"]
    split = cli("mt.translate", *model, " ".join(sentences))
    each = cli("mt.translate", *model, "--no-split", *sentences)
    whole = cli("mt.translate", *model, "--no-split", " ".join(sentences))
    assert split.returncode == each.returncode == whole.returncode == 0, split.stderr + whole.stderr
    assert len(each.stdout.splitlines()) == 3 and split.stdout == " ".join(each.stdout.splitlines()) + "\n"
    assert len(whole.stdout.splitlines()) == 1 and len(whole.stdout.split()) < len(split.stdout.split())


def test_evaluate_scores_paragraphs_against_paragraph_references(run_dir, tmp_path):
    (tmp_path / "p.fr").write_text("le chat noir\nle homme rouge\n")
    (tmp_path / "p.en").write_text("the black cat\nthe red man\n")
    result = cli(
        "mt.evaluate", "--model", str(run_dir), "--src", str(tmp_path / "p.fr"), "--ref", str(tmp_path / "p.en"),
        "--documents", "--json", "--greedy",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    scored = json.loads(result.stdout)
    assert scored["sentences"] == 2 and scored["decoding"] == "greedy-documents" and scored["chrf"] > 20


@pytest.mark.parametrize("split", [True, False])
def test_n_best_lists_stay_one_sentence_a_line(run_dir, split):
    args = ["--n-best", "2", "--beam", "2"] + ([] if split else ["--no-split"])
    result = cli("mt.translate", "--model", str(run_dir), *args, "Le chat noir. Le chien blanc.")
    assert result.returncode == 0, result.stderr
    assert [line.split("\t")[0] for line in result.stdout.splitlines()] == ["0", "0"]

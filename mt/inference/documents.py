"""Documents, not only sentences: each line is cut into sentences, every sentence of every line is
translated in one batch with the rest, and each line's translations are joined back into one line.

Models are trained on sentences of at most `data.max_len` tokens, so a paragraph decoded as one
"sentence" loses or repeats sentences, and a source past the model's positions would be cut. So a
line is segmented (the Moses splitter where it knows the language, `sentencex` elsewhere: docs/
results.md compares them), and a sentence still longer than the model takes is cut at its clause
boundaries (; : , and dashes, and their full-width forms), then at word boundaries, then, in text
written without spaces, at the token limit: no part of the input goes untranslated. Pieces are
joined as the target language writes (with a space, or none in Chinese and Japanese).

A line keeps its leading and trailing whitespace, an empty or blank line comes back as it went in,
and a multilingual model's target tag at the start of a line (`>>fra<<`) goes with every sentence
and piece of it. Each piece's place in its line is kept (`Cut.offsets`), for markup to be put back.
"""

from __future__ import annotations

import contextlib
import functools
import re
from dataclasses import dataclass, field

from mt.deadline import checkpoint

FULL_WIDTH_MARKS = "，；：、"  # clause marks of text written without spaces: no space follows them
CLAUSE_END = re.compile(rf"(?<=[;:,])\s+|(?<=[{FULL_WIDTH_MARKS}])\s*|\s+(?=[–—-]\s)")  # after ; : , or before a dash
TARGET_TAG = re.compile(r">>[^<>\s]+<<\s*")  # a multilingual model's target language, e.g. >>fra<<
UNSPACED = {"zh", "ja", "yue", "wuu"}  # written without spaces between sentences


@functools.cache
def sentence_splitter(lang: str):
    """A function from a paragraph to its sentences, for language `lang`."""
    from sentence_splitter import SentenceSplitter, SentenceSplitterException

    try:
        return SentenceSplitter(language=lang).split
    except SentenceSplitterException:  # a language the Moses lists lack: sentencex covers ~300
        from sentencex import segment

        return lambda text: [s.strip() for s in segment(lang, text) if s.strip()]


def joiner(lang: str) -> str:
    """What separates two sentences in language `lang`: a space, or nothing where it is written without."""
    return "" if re.split(r"[-_]", lang.lower())[0] in UNSPACED else " "


@dataclass
class Line:
    """One line as the segmenter left it: its whitespace around, its target tag, its sentences."""

    lead: str
    trail: str
    tag: str  # '>>fra<< ' or ''
    sentences: list[str]
    body_at: int  # where the text after the tag starts in the line


def segment_lines(lines: list[str], lang: str, split: bool = True) -> list[Line]:
    """Each line's sentences (one a line where `split` is off), before any is cut to the model."""
    segment = sentence_splitter(lang) if split else (lambda text: [text])
    out = []
    for line in lines:
        checkpoint()  # a server's request past its deadline stops between lines
        body = line.strip()
        if not body:  # blank: kept whole, nothing to translate
            out.append(Line(line, "", "", [], len(line)))
            continue
        lead, trail = line[: len(line) - len(line.lstrip())], line[len(line.rstrip()) :]
        tag = TARGET_TAG.match(body)
        text = body[tag.end() :] if tag else body
        out.append(Line(lead, trail, tag.group().strip() + " " if tag else "", segment(text) if text else [], 0))
        out[-1].body_at = len(lead) + (tag.end() if tag else 0)
    return out


@dataclass
class Cut:
    """How one line was cut: its whitespace around, how many pieces each sentence became, and
    where each piece lies in the line, as (start, end) character offsets."""

    lead: str
    trail: str
    pieces: list[int]
    offsets: list[tuple[int, int]] = field(default_factory=list)


def _by_characters(text: str, fits) -> list[str]:
    """`text` (one word, or text written without spaces) in the longest leading pieces that fit."""
    out = []
    while text and not fits(text):
        low, high = 1, len(text)  # the longest prefix that fits, at least one character
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if fits(text[:mid]) else (low, mid - 1)
        out.append(text[:low])
        text = text[low:]
    return out + ([text] if text else [])


def _clauses(sentence: str, fits, pack) -> list[str]:
    """`sentence` in pieces that each `fits`: whole where it does, else at clause boundaries, then
    at word boundaries, then at characters (text without spaces). Only clauses so short that
    together they still `pack` share a piece: a clause is what the model translates best on its own."""
    if fits(sentence):
        return [sentence]
    parts = [p for p in CLAUSE_END.split(sentence) if p]
    if len(parts) == 1:
        words = sentence.split()
        if len(words) == 1:
            return _by_characters(sentence, fits)
        half = len(words) // 2
        parts = [" ".join(words[:half]), " ".join(words[half:])]
    out, current = [], ""
    for part in parts:
        glue = "" if not current or current[-1] in FULL_WIDTH_MARKS else " "
        joined = f"{current}{glue}{part}"
        if current and not pack(joined):
            out.append(current)
            current = part
        else:
            current = joined
    out.append(current)
    return [piece for part in out for piece in _clauses(part, fits, pack)]


def _locate(piece: str, line: str, start: int) -> tuple[int, int]:
    """Where `piece` lies in `line` from `start`: the segmenter and the cut may have changed its
    whitespace, never its other characters."""
    at = line.find(piece, start)  # as it stands, nearly always: no pattern to build
    if at >= 0:
        return at, at + len(piece)
    found = re.compile(r"\s+".join(re.escape(word) for word in piece.split())).search(line, start)
    return (found.start(), found.end()) if found else (start, min(len(line), start + len(piece)))


def cut_segmented(segmented: list[Line], lines: list[str], limit: int, count) -> tuple[list[str], list[Cut], list[int]]:
    """The pieces to translate, each at most `limit` tokens as `count` counts them (a line's tag
    included), how to join them back, and the indices of the lines that had a sentence cut."""
    pieces, cuts, long_lines = [], [], []
    for index, (line, seg) in enumerate(zip(lines, segmented)):
        checkpoint()
        counts, offsets, at = [], [], seg.body_at
        fits = lambda text, tag=seg.tag: count(tag + text) <= limit  # noqa: E731
        pack = lambda text, tag=seg.tag: count(tag + text) <= limit // 8  # noqa: E731
        for sentence in seg.sentences:
            parts = _clauses(sentence, fits, pack)
            for part in parts:
                offsets.append(_locate(part, line, at))
                at = offsets[-1][1]
            pieces += [seg.tag + part for part in parts]
            counts.append(len(parts))
        if any(n > 1 for n in counts):
            long_lines.append(index)
        cuts.append(Cut(seg.lead, seg.trail, counts, offsets))
    return pieces, cuts, long_lines


def cut_lines(
    lines: list[str], lang: str, limit: int, count, split: bool = True
) -> tuple[list[str], list[Cut], list[int]]:
    """Every line's sentences (one sentence a line where `split` is off), each cut to at most `limit`
    tokens as `count` counts them: (the pieces to translate, how to join them back, the indices of
    the lines that had a sentence cut)."""
    return cut_segmented(segment_lines(lines, lang, split), lines, limit, count)


def join_lines(translations: list[str], cuts: list[Cut], lang: str = "en") -> list[str]:
    """The translated pieces joined back into one line per input line, as language `lang` writes."""
    out, at, sep = [], 0, joiner(lang)
    for cut in cuts:
        n = sum(cut.pieces)
        text = sep.join(t for t in translations[at : at + n] if t)
        out.append(f"{cut.lead}{text}{cut.trail}")
        at += n
    return out


def lines_of(texts: list[str]) -> tuple[list[str], list[int]]:
    """Texts that may hold line breaks as lines, with how many lines each text has."""
    split = [text.split("\n") for text in texts]
    return [line for lines in split for line in lines], [len(lines) for lines in split]


def texts_of(lines: list[str], counts: list[int]) -> list[str]:
    """`lines_of` undone: each text's lines joined by its line breaks."""
    return ["\n".join(group) for group in grouped(lines, counts)]


def grouped(items: list, counts: list[int]) -> list[list]:
    """`items` in consecutive groups of `counts`."""
    out, at = [], 0
    for n in counts:
        out.append(items[at : at + n])
        at += n
    return out


@dataclass
class DocumentResult:
    lines: list[str]
    sentences: int  # the lines' sentences (one a line without splitting)
    long_sentences: int  # of them, those longer than the model takes, translated in pieces cut at clauses
    long_lines: list[int] = field(default_factory=list)  # the indices of the lines that held them
    # with a Trust: each line's pieces, as (source, translation, Confidence), in order
    judged: list[list[tuple]] | None = None

    @property
    def withheld(self) -> int:
        return sum(c.withheld for line in self.judged or [] for _, _, c in line)

    def line_confidence(self, index: int) -> float:
        """A line's confidence: its least sure sentence's (1 for a line with none)."""
        return min((c.score for _, _, c in self.judged[index]), default=1.0)

    def long_note(self, limit: int) -> str:
        """One line naming what was cut, for a command to print."""
        named = ", ".join(str(i + 1) for i in self.long_lines[:10]) + (", ..." if len(self.long_lines) > 10 else "")
        lines = "line" if len(self.long_lines) == 1 else "lines"
        return (
            f"{self.long_sentences} of {self.sentences} sentences were longer than the model takes ({limit} tokens) "
            f"and were translated in pieces cut at clauses ({lines} {named})"
        )


def token_counter(translator):
    return lambda text: len(translator.tokenizer.encode(text))


def cut_for(translator, lines: list[str], split: bool = True) -> tuple[list[str], list[Cut], list[int]]:
    """`cut_lines` for `translator`'s source language and model, counting tokens as it encodes."""
    return cut_lines(lines, translator.cfg.data.src_lang, translator.max_src_tokens, token_counter(translator), split)


@contextlib.contextmanager
def progress_bar(sentences: int, shown: bool):
    """A bar over `sentences` as they are translated (nothing where not `shown`): yields the
    function a translator tells each batch's count to."""
    if not shown or not sentences:
        yield None
        return
    from tqdm import tqdm

    with tqdm(total=sentences, unit="sentence", desc="translating", leave=False) as bar:
        yield bar.update


def translate_lines(
    translator,
    lines: list[str],
    options,
    batch_size: int = 64,
    split: bool = True,
    progress: bool = False,
    trust=None,
) -> DocumentResult:
    """Translate `lines` of text as documents: see the module notes. `split` off translates each
    line as one sentence (still cut where it is longer than the model takes); `progress` shows a
    bar; `trust` (mt/inference/confidence.py) judges each piece and may withhold it."""
    pieces, cuts, long_lines = cut_for(translator, lines, split)
    translations, judged = [], None
    with progress_bar(len(pieces), progress) as tell:
        if pieces:  # hypotheses, to judge: with their tokens' log-probabilities
            found = translator.translate(pieces, options, batch_size=batch_size, progress=tell, hypotheses=bool(trust))
            translations = found if trust is None else [h[0] for h in found]
    if trust is not None:
        translations, confidences = trust.apply(translator, pieces, translations)
        judged = grouped(list(zip(pieces, translations, confidences)), [sum(cut.pieces) for cut in cuts])
    joined = join_lines(translations, cuts, translator.cfg.data.tgt_lang)
    long = sum(sum(n > 1 for n in cut.pieces) for cut in cuts)
    return DocumentResult(joined, sum(len(c.pieces) for c in cuts), long, long_lines, judged)

"""Documents, not only sentences: each line is cut into sentences, every sentence of every line is
translated in one batch with the rest, and each line's translations are joined back into one line.

Models are trained on sentences of at most `data.max_len` tokens, so a paragraph decoded as one
"sentence" loses or repeats sentences, and a source past the model's positions would be cut. So a
line is segmented (the Moses splitter where it knows the language, `sentencex` elsewhere: docs/
results.md compares them), and a sentence still longer than the model takes is cut at its clause
boundaries (; : , and dashes), then at the token limit, and its pieces' translations joined: no
part of the input goes untranslated. Empty lines stay empty, and a line's leading and trailing
whitespace is kept.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

CLAUSE_END = re.compile(r"(?<=[;:,])\s+|\s+(?=[–—-]\s)")  # after ; : , or before a spaced dash


@functools.cache
def sentence_splitter(lang: str):
    """A function from a paragraph to its sentences, for language `lang`."""
    from sentence_splitter import SentenceSplitter, SentenceSplitterException

    try:
        return SentenceSplitter(language=lang).split
    except SentenceSplitterException:  # a language the Moses lists lack: sentencex covers ~300
        from sentencex import segment

        return lambda text: [s.strip() for s in segment(lang, text) if s.strip()]


@dataclass
class Cut:
    """How one line was cut: its whitespace around, and how many pieces each sentence became."""

    lead: str
    trail: str
    pieces: list[int]


def _clauses(sentence: str, fits, pack) -> list[str]:
    """`sentence` in pieces that each `fits`: whole where it does, else at clause boundaries, then
    at word boundaries (the token limit) as a last resort. Only clauses so short that together
    they still `pack` share a piece: a clause is what the model translates best on its own."""
    if fits(sentence):
        return [sentence]
    parts = [p for p in CLAUSE_END.split(sentence) if p]
    if len(parts) == 1:
        words = sentence.split()
        if len(words) == 1:
            return [sentence]  # one word longer than the model: the encoder's cut is all that is left
        half = len(words) // 2
        parts = [" ".join(words[:half]), " ".join(words[half:])]
    out, current = [], ""
    for part in parts:
        joined = f"{current} {part}" if current else part
        if current and not pack(joined):
            out.append(current)
            current = part
        else:
            current = joined
    out.append(current)
    return [piece for part in out for piece in _clauses(part, fits, pack)]


def cut_lines(lines: list[str], lang: str, limit: int, count, split: bool = True) -> tuple[list[str], list[Cut], int]:
    """Every line's sentences (one sentence a line where `split` is off), each cut to at most `limit`
    tokens as `count` counts them: (the pieces to translate, how to join them back, the number of
    sentences that had to be cut)."""
    segment = sentence_splitter(lang) if split else (lambda text: [text])
    pieces, cuts, long = [], [], 0
    for line in lines:
        body = line.strip()
        lead, trail = line[: len(line) - len(line.lstrip())], line[len(line.rstrip()) :]
        counts = []
        for sentence in segment(body) if body else []:
            parts = _clauses(sentence, lambda text: count(text) <= limit, lambda text: count(text) <= limit // 8)
            long += len(parts) > 1
            pieces += parts
            counts.append(len(parts))
        cuts.append(Cut(lead, trail, counts))
    return pieces, cuts, long


def join_lines(translations: list[str], cuts: list[Cut]) -> list[str]:
    """The translated pieces joined back into one line per input line."""
    out, at = [], 0
    for cut in cuts:
        n = sum(cut.pieces)
        text = " ".join(t for t in translations[at : at + n] if t)
        out.append(f"{cut.lead}{text}{cut.trail}" if text else cut.lead + cut.trail if cut.pieces else "")
        at += n
    return out


@dataclass
class DocumentResult:
    lines: list[str]
    sentences: int  # the lines' sentences (one a line without splitting)
    long_sentences: int  # of them, those longer than the model takes, translated in pieces cut at clauses


def cut_for(translator, lines: list[str], split: bool = True) -> tuple[list[str], list[Cut], int]:
    """`cut_lines` for `translator`'s source language and model, counting tokens as it encodes."""
    count = lambda text: len(translator.tokenizer.encode(text))  # noqa: E731
    return cut_lines(lines, translator.cfg.data.src_lang, translator.max_src_tokens, count, split)


def translate_lines(translator, lines: list[str], options, batch_size: int = 64, split: bool = True) -> DocumentResult:
    """Translate `lines` of text as documents: see the module notes. `split` off translates each
    line as one sentence (still cut where it is longer than the model takes)."""
    pieces, cuts, long = cut_for(translator, lines, split)
    translations = translator.translate(pieces, options, batch_size=batch_size) if pieces else []
    return DocumentResult(join_lines(translations, cuts), sum(len(c.pieces) for c in cuts), long)

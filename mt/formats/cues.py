"""A subtitle cue's text, as SubRip and WebVTT write it: its lines cut into speaker turns, each
turn's tags read as spans and voids, and the translation written back over as many lines.

A cue's lines are one sentence split for the screen, so a turn's lines are joined and translated as
one text, then wrapped again into as many lines, of even lengths. A line led by a dash (`- Salut`),
or by a WebVTT voice (`<v Jean>`), starts a turn of its own: two people speaking, translated apart,
each kept on its own line. Tags (`<i>`, `<font color=...>`, `<c.yellow>`, `<v Jean>`) are spans; a
timestamp (`<00:00:05.000>`) or a closing tag with nothing open is a void. A tag the cue leaves
open stays open where its words still run to the turn's end, and is closed where they moved.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from mt.formats.spans import Segment, Span, Void

# A tag is `<` or `</` before a letter, or a timestamp; any other `<` is text ("<< oui >>", "a < b").
_ANY_TAG = r"<(?:/?[A-Za-z]|\d)[^>]*>"
_TAG = re.compile(r"<(?:(/?)([A-Za-z][^\s>./]*)|\d)[^>]*>")  # <v Bob>, <c.yellow>, </i>; <00:00:02.000> unnamed
_OPENING = re.compile(r"(?:<[A-Za-z\d][^>]*>)*")  # the tags a line opens with
_LEAD = re.compile(_OPENING.pattern + r"[ \t]*[-\u2010\u2013\u2014][ \t]*")  # "- ", "<i>- ": a turn's dash
_VOICE = re.compile(r"<v[\s.>]")
_WORD = re.compile(rf"(?:{_ANY_TAG}|\S)+")  # a word with the tags that touch it


@dataclass
class Tag:
    """A tag as the cue wrote it, with its name (i, c, v, font) and whether the cue closes it."""

    opens: str
    name: str
    closed: bool = False


def read(text: str, entities: bool) -> Segment:
    """A turn's text as a segment; `entities` (WebVTT's `&amp;`, `&lt;`) read as characters."""
    segment, stack, at = Segment(""), [], 0
    for m in [*_TAG.finditer(text), None]:
        piece = text[at : m.start() if m else len(text)]
        segment.text += html.unescape(piece) if entities else piece
        if m is None:
            break
        at = m.end()
        if m.group(1) and stack:
            index = stack.pop()
            segment.spans[index].tag.closed = True
            segment.spans[index] = Span(segment.spans[index].start, len(segment.text), segment.spans[index].tag,
                                        frozenset(stack))  # fmt: skip
        elif m.group(1) or m.group(2) is None:  # a closing tag with nothing open, or a timestamp
            segment.voids.append(Void(len(segment.text), m.group(), frozenset(stack), opened=len(segment.spans)))
        else:
            segment.spans.append(
                Span(len(segment.text), len(segment.text), Tag(m.group(), m.group(2)), frozenset(stack))
            )
            stack.append(len(segment.spans) - 1)
    for index in stack:  # open to the end
        span = segment.spans[index]
        segment.spans[index] = Span(span.start, len(segment.text), span.tag, span.within)
    return segment


def write(nodes: list, escape, at_end: bool = True) -> str:
    """A translated tree as cue text, its text through `escape`."""
    out = []
    for i, n in enumerate(nodes):
        if isinstance(n, str):
            out.append(escape(n))
        elif n.void:
            out.append(n.tag)
        else:
            last = at_end and all(isinstance(x, str) and not x.strip() for x in nodes[i + 1 :])
            closes = "" if last and not n.tag.closed else f"</{n.tag.name}>"
            out.append(n.tag.opens + write(n.children, escape, last) + closes)
    return "".join(out)


def turns(lines: list[str]) -> list[tuple[str, list[str]]]:
    """A cue's lines as speaker turns: what leads each (its dash, and the tags the source opened
    before it) and its lines without the dash. The tags stay in the turn's text too, where their
    closing tags find them (`<i>- Oui.</i>`); `behind` writes them before the dash again."""
    out: list[tuple[str, list[str]]] = []
    for i, line in enumerate(lines):
        lead = _LEAD.match(line)
        if lead:
            tags = _OPENING.match(line).group()
            out.append((lead.group(), [tags + line[lead.end() :]]))
        elif i == 0 or _VOICE.match(line):
            out.append(("", [line]))
        else:
            out[-1][1].append(line)
    return out


def behind(lead: str, line: str) -> str:
    """A turn's first line behind its lead: the tags the source opened before its dash stay before
    it where the line still opens with them; else the dash alone leads."""
    tags = _OPENING.match(lead).group()
    dash = lead[len(tags) :]
    return tags + dash + line[len(tags) :] if line.startswith(tags) else dash + line


def _shown(text: str) -> int:
    """How many characters of `text` a screen shows: its tags left out."""
    return len(re.sub(_ANY_TAG, "", text))


def wrap_evenly(text: str, lines: int) -> list[str]:
    """`text` in at most `lines` lines of about equal shown length, broken at spaces outside tags."""
    words = _WORD.findall(text)
    if lines <= 1 or len(words) <= 1:
        return [text]
    total = _shown(text)
    out, current = [], ""
    for i, word in enumerate(words):
        rows_left = lines - len(out)
        target = (total - sum(_shown(r) + 1 for r in out)) / rows_left
        wide = _shown(current) + 1 + _shown(word) / 2 > target
        if current and rows_left > 1 and wide and len(words) - i >= rows_left - 1:
            out.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    return out + [current]


def translate_cues(
    cues: list[list[str]], translate_segments, entities: bool, escape=lambda text: text
) -> list[list[str]]:
    """Each cue's lines translated, turn by turn, in one call of `translate_segments`: as many lines
    as it had. `entities` and `escape`: how the format reads and writes its characters."""
    work = []  # (cue, lead, line count, segment)
    for k, lines in enumerate(cues):
        for lead, held in turns(lines):
            segment = read(" ".join(line.strip() for line in held), entities)
            work.append((k, lead, held, segment if segment.text.strip() else None))
    segments = [w[3] for w in work if w[3] is not None]
    translated = iter(translate_segments(segments) if segments else [])
    out: list[list[str]] = [[] for _ in cues]
    for k, lead, held, segment in work:
        if segment is None:
            out[k] += [behind(lead, held[0]), *held[1:]]
            continue
        rows = wrap_evenly(write(next(translated), escape).strip(), len(held))
        out[k] += [behind(lead, rows[0]), *rows[1:]]
    return out

"""Subtitles, SubRip (.srt) and WebVTT (.vtt): every cue translated, its number, timings and
settings unchanged.

A cue's lines are one sentence split for the screen, so they are joined and translated as one text,
with its italics and colours (`<i>`, `<font>`: the HTML path's inline markup) kept on the right
words; the translation is then wrapped again into as many lines as the cue had, of even lengths.
SubRip is parsed and written by the `srt` package. A WebVTT file is cut into its blocks as written
(its header, notes, styles and regions kept byte for byte), and its cue tags (`<v Speaker>`,
`<c.yellow>`, `<i>`, timestamps) go through the HTML path as spans and voids standing for them.
"""

from __future__ import annotations

import re

from mt.errors import UserError
from mt.formats.html import translate_html_many

_OVERRIDES = re.compile(r"^(\{\\[^}]*\})+")  # {\an8} and the like: placement codes before the text
_WORD = re.compile(r"(?:<[^>]*>)*[^\s<]+(?:<[^>]*>)*|<[^>]*>")  # a word with the tags that touch it
_TAGS = re.compile(r"<[^>]*>")


def _shown(text: str) -> int:
    """How many characters of `text` a screen shows: its tags left out."""
    return len(_TAGS.sub("", text))


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


def translate_srt(text: str, translate_segments) -> str:
    """A whole .srt file translated: see the module notes."""
    import srt

    try:
        cues = list(srt.parse(text))
    except srt.SRTParseError as e:
        raise UserError(f"not a SubRip (.srt) file: {str(e).splitlines()[0][:160]}") from None
    overrides, bodies = [], []
    for cue in cues:
        content = cue.content.strip()
        found = _OVERRIDES.match(content)
        overrides.append(found.group() if found else "")
        bodies.append(" ".join(line.strip() for line in content[len(overrides[-1]) :].split("\n")))
    translated = translate_html_many(bodies, translate_segments, escape=False)  # "Tom & Jerry" stays so
    for cue, head, body, new in zip(cues, overrides, bodies, translated):
        lines = len(cue.content.strip().split("\n"))
        cue.content = head + "\n".join(wrap_evenly(new.strip(), lines)) if body.strip() else cue.content
    return srt.compose(cues, reindex=False, eol="\r\n" if "\r\n" in text else "\n")


_VTT_TAG = re.compile(r"<(/?)([^\s>./]*)[^>]*>")  # <v Bob>, <c.yellow>, </i>, <00:00:02.000>
_NOT_A_CUE = re.compile(r"(?:NOTE|STYLE|REGION)(?:[ \t]|$)")
_STANDS_FOR = re.compile(r'<span data-vtt="(\d+)">|</span>|<wbr data-vtt="(\d+)"/?>')


def _cue_as_html(text: str) -> tuple[str, list[str], set[int]]:
    """A cue's text as HTML: each tag a span (a timestamp a void) that names it by its index; with
    the tags, and which of them the cue closes (a voice often is not)."""
    tags: list[str] = []
    open_tags: list[int] = []
    closed: set[int] = set()

    def stand_in(m: re.Match) -> str:
        tags.append(m.group())
        if m.group(2)[:1].isdigit():
            return f'<wbr data-vtt="{len(tags) - 1}">'
        if m.group(1):
            if open_tags:
                closed.add(open_tags.pop())
            return "</span>"
        open_tags.append(len(tags) - 1)
        return f'<span data-vtt="{len(tags) - 1}">'

    return _VTT_TAG.sub(stand_in, text), tags, closed


def _cue_from_html(html: str, tags: list[str], closed: set[int]) -> str:
    out, opened, at = [], [], 0
    for m in _STANDS_FOR.finditer(html):
        out.append(html[at : m.start()])
        at = m.end()
        if m.group(1) is not None:
            opened.append(int(m.group(1)))
            out.append(tags[opened[-1]])
        elif m.group(2) is not None:
            out.append(tags[int(m.group(2))])
        elif opened:  # a tag the cue left open stays open only where it still runs to the cue's end
            index = opened.pop()
            if index in closed or re.sub(r"</span>|\s", "", html[m.end() :]):
                out.append(f"</{_VTT_TAG.match(tags[index]).group(2)}>")
    return "".join(out) + html[at:]


def _vtt_blocks(lines: list[str]) -> list[tuple[int, int]]:
    """(first, end) line ranges of the blocks that empty lines part (a line of spaces is in a cue)."""
    blocks, start = [], None
    for i, line in enumerate(lines + [""]):
        if line and start is None:
            start = i
        elif not line and start is not None:
            blocks.append((start, i))
            start = None
    return blocks


def translate_vtt(text: str, translate_segments) -> str:
    """A whole .vtt file translated: see the module notes."""
    eol = "\r\n" if "\r\n" in text else "\r" if "\r" in text else "\n"
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if not re.match(r"\ufeff?WEBVTT(?:[ \t]|$)", lines[0]):
        raise UserError("not a WebVTT (.vtt) file: its first line is not WEBVTT")
    cues = []  # (first payload line, end, the cue as HTML, its tags, which it closes)
    for start, end in _vtt_blocks(lines)[1:]:
        timing = next((i for i in range(start, min(start + 2, end)) if "-->" in lines[i]), None)
        if timing is None or _NOT_A_CUE.match(lines[start]) or timing + 1 >= end:
            continue
        body = " ".join(line.strip() for line in lines[timing + 1 : end])
        cues.append((timing + 1, end, *_cue_as_html(body)))
    translated = translate_html_many([html for _, _, html, _, _ in cues], translate_segments)
    for (first, end, _, tags, closed), new in reversed(list(zip(cues, translated))):
        lines[first:end] = wrap_evenly(_cue_from_html(new.strip(), tags, closed), end - first)
    return eol.join(lines)

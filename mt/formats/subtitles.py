"""SubRip subtitles (.srt): every cue translated, its number and timings unchanged.

A cue's lines are one sentence split for the screen, so they are joined and translated as one text,
with its italics and colours (`<i>`, `<font>`: the HTML path's inline markup) kept on the right
words; the translation is then wrapped again into as many lines as the cue had, of even lengths.
Parsed and written by the `srt` package.
"""

from __future__ import annotations

import re

from mt.errors import UserError
from mt.formats.html import translate_html_many

_OVERRIDES = re.compile(r"^(\{\\[^}]*\})+")  # {\an8} and the like: placement codes before the text
_WORD = re.compile(r"(?:<[^>]*>)*[^\s<]+(?:<[^>]*>)*|<[^>]*>")  # a word with the tags that touch it


def wrap_evenly(text: str, lines: int) -> list[str]:
    """`text` in at most `lines` lines of about equal length, broken at spaces outside tags."""
    words = _WORD.findall(text)
    if lines <= 1 or len(words) <= 1:
        return [text]
    total = len(text)
    out, current = [], ""
    for i, word in enumerate(words):
        rows_left = lines - len(out)
        target = (total - sum(len(r) + 1 for r in out)) / rows_left
        if current and rows_left > 1 and len(current) + 1 + len(word) / 2 > target and len(words) - i >= rows_left - 1:
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

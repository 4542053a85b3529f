"""WebVTT subtitles (.vtt): every cue's text translated (mt/formats/cues.py), its identifier,
timings and settings unchanged. The file is cut into its blocks as written, so its header, notes,
styles and regions are kept byte for byte, as are its line ends. A cue's `&amp;` and `&lt;` are read
as characters and written as entities again, as are the other entities it wrote."""

from __future__ import annotations

import re

from mt.errors import UserError
from mt.formats.cues import translate_cues
from mt.formats.entities import escaping

_NOT_A_CUE = re.compile(r"(?:NOTE|STYLE|REGION)(?:[ \t]|$)")


def _blocks(lines: list[str]) -> list[tuple[int, int]]:
    """(first, end) line ranges of the blocks that empty lines part (a line of spaces is in a cue)."""
    blocks, start = [], None
    for i, line in enumerate(lines + [""]):
        if line and start is None:
            start = i
        elif not line and start is not None:
            blocks.append((start, i))
            start = None
    return blocks


def translate(text: str, job) -> str:
    """A whole .vtt file translated (the vtt format's adapter): see the module notes."""
    eol = "\r\n" if "\r\n" in text else "\r" if "\r" in text else "\n"
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if not re.match(r"\ufeff?WEBVTT(?:[ \t]|$)", lines[0]):
        raise UserError("not a WebVTT (.vtt) file: its first line is not WEBVTT")
    payloads = []  # (first payload line, end)
    for start, end in _blocks(lines)[1:]:
        timing = next((i for i in range(start, min(start + 2, end)) if "-->" in lines[i]), None)
        if timing is not None and not _NOT_A_CUE.match(lines[start]) and timing + 1 < end:
            payloads.append((timing + 1, end))
    cues = [lines[first:end] for first, end in payloads]
    translated = translate_cues(cues, job.segments, entities=True, escape=escaping(text))
    for (first, end), new in reversed(list(zip(payloads, translated))):
        lines[first:end] = new
    return eol.join(lines)

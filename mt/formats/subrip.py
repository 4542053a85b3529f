"""SubRip subtitles (.srt): every cue's text translated (mt/formats/cues.py), its number and timings
unchanged, parsed and written by the `srt` package. Placement codes before a cue's text (`{\\an8}`)
stay before it, and its text is written as it is: SubRip knows no entities ("Tom & Jerry")."""

from __future__ import annotations

import re

from mt.errors import UserError
from mt.formats.cues import translate_cues

_OVERRIDES = re.compile(r"^(\{\\[^}]*\})+")  # {\an8} and the like: placement codes before the text


def translate(text: str, job) -> str:
    """A whole .srt file translated (the srt format's adapter): see the module notes."""
    import srt

    try:
        cues = list(srt.parse(text))
    except srt.SRTParseError as e:
        raise UserError(f"not a SubRip (.srt) file: {str(e).splitlines()[0][:160]}") from None
    heads, bodies = [], []
    for cue in cues:
        content = cue.content.strip()
        found = _OVERRIDES.match(content)
        heads.append(found.group() if found else "")
        bodies.append(content[len(heads[-1]) :].split("\n"))
    translated = translate_cues(bodies, job.segments, entities=False)
    for cue, head, lines in zip(cues, heads, translated):
        cue.content = head + "\n".join(lines)
    return srt.compose(cues, reindex=False, eol="\r\n" if "\r\n" in text else "\n")

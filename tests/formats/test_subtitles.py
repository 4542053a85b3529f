"""SubRip subtitles (mt/formats/subtitles.py), read back with the `srt` package: the same cues,
numbers and timings; each cue's lines translated as one text and wrapped to as many lines."""

import pytest
from helpers import Upper

srt = pytest.importorskip("srt", reason="the formats extra is not installed (pip install 'mt[formats]')")

from mt.formats.subtitles import wrap_evenly  # noqa: E402
from mt.inference.formatted import translate_formatted  # noqa: E402

SUBTITLES = """1
00:00:01,000 --> 00:00:03,500
Bonjour tout le monde,
comment allez-vous ?

2
00:00:04,000 --> 00:00:06,250
{\\an8}<i>Une voix</i> au loin.

7
00:01:07,000 --> 00:01:08,000
Un
deux trois quatre cinq six sept huit
"""


def test_cues_numbers_and_timings_are_unchanged_and_each_cue_keeps_its_line_count():
    upper = Upper()
    out = translate_formatted(upper, SUBTITLES.encode(), "srt")
    before, after = list(srt.parse(SUBTITLES)), list(srt.parse(out.decode()))
    assert [(c.index, c.start, c.end) for c in after] == [(c.index, c.start, c.end) for c in before]
    assert [len(c.content.splitlines()) for c in after] == [2, 1, 2]
    assert upper.seen[0] == "Bonjour tout le monde, comment allez-vous ?"  # one text, not two
    assert after[1].content == "{\\an8}<i>UNE VOIX</i> AU LOIN."
    assert " ".join(after[2].content.split()) == "UN DEUX TROIS QUATRE CINQ SIX SEPT HUIT"


def test_lines_are_wrapped_evenly_at_spaces_outside_tags():
    assert wrap_evenly("a bb ccc dddd eeeee ffffff", 3) == ["a bb ccc", "dddd eeeee", "ffffff"]
    tagged = wrap_evenly("<i>un deux</i> trois", 2)
    assert (
        len(tagged) == 2
        and " ".join(tagged) == "<i>un deux</i> trois"
        and all(line.count("<") == line.count(">") for line in tagged)
    )
    assert wrap_evenly("seul", 3) == ["seul"]

"""Subtitles (mt/formats/subrip.py, webvtt.py, cues.py): SubRip read back with the `srt` package,
WebVTT with `webvtt-py`: the same cues, numbers, timings and settings; each turn of a cue's lines
translated as one text and wrapped to as many lines; WebVTT's cue tags, notes and styles kept."""

import pytest
from helpers import Reverse, Upper

srt = pytest.importorskip("srt", reason="the formats extra is not installed (pip install 'mt[formats]')")

from mt.formats.cues import wrap_evenly  # noqa: E402
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


VTT = """WEBVTT - un film

NOTE une remarque
sur deux lignes

STYLE
::cue(.jaune) { color: yellow; }

intro
00:00:01.000 --> 00:00:03.500 align:start line:10%
<v Marie>Bonjour tout le monde,
comment allez-vous ?

00:00:04.000 --> 00:00:06.250
<c.jaune>Une voix</c> au loin <00:00:05.000>&amp; la mer.
"""


def test_webvtt_keeps_its_header_notes_styles_settings_and_cue_tags():
    webvtt = pytest.importorskip("webvtt", reason="webvtt-py is in the dev extra (pip install 'mt[dev]')")
    upper = Upper()
    out = translate_formatted(upper, VTT.encode(), "vtt").decode()
    assert out.startswith("WEBVTT - un film\n\nNOTE une remarque\nsur deux lignes\n\nSTYLE\n::cue(.jaune)")
    assert "00:00:01.000 --> 00:00:03.500 align:start line:10%" in out
    assert upper.seen[:2] == ["Bonjour tout le monde, comment allez-vous ?", "Une voix au loin & la mer."]
    before, after = webvtt.from_string(VTT), webvtt.from_string(out)
    assert [(c.identifier, c.start, c.end) for c in after] == [(c.identifier, c.start, c.end) for c in before]
    first, second = after.captions
    assert first.raw_text == "<v Marie>BONJOUR TOUT LE MONDE,\nCOMMENT ALLEZ-VOUS ?"  # the voice left open, as it was
    assert second.raw_text == "<c.jaune>UNE VOIX</c> AU LOIN <00:00:05.000>&amp; LA MER."  # the time before its word


def test_a_file_without_the_webvtt_line_is_one_line_error():
    from mt.errors import UserError

    with pytest.raises(UserError, match="not a WebVTT"):
        translate_formatted(Upper(), b"00:00:01.000 --> 00:00:02.000\nbonjour\n", "vtt")


def test_webvtt_cues_are_found_as_the_format_defines_them():
    from mt.formats.cues import read, write
    from mt.formats.spans import Element

    segment = read("un <c.rouge>deux trois", entities=True)  # a class left open to the cue's end
    (span,) = segment.spans
    assert segment.text == "un deux trois" and (span.start, span.end, span.tag.opens, span.tag.closed) == (
        3,
        13,
        "<c.rouge>",
        False,
    )
    assert write(["ONE ", Element(span.tag, ["TWO THREE"])], str) == "ONE <c.rouge>TWO THREE"
    moved = write([Element(span.tag, ["THREE TWO"]), " ONE"], str)
    assert moved == "<c.rouge>THREE TWO</c> ONE"  # moved forward, it is closed: it takes in no other words
    upper = Upper()
    text = "WEBVTT\r\rNOTEWORTHY\r00:01.000 --> 00:02.000\rune ligne\r \rune autre\r"
    out = translate_formatted(upper, text.encode(), "vtt").decode()
    head, cue = out.split("\r")[:4], out.split("\r")[4:-1]  # CR line ends, a cue named NOTEWORTHY
    assert head == ["WEBVTT", "", "NOTEWORTHY", "00:01.000 --> 00:02.000"] and out.endswith("\r")
    assert " ".join(cue).split() == "UNE LIGNE UNE AUTRE".split() and len(cue) == 3  # a line of spaces is in it


TURNS = """1
00:00:01,000 --> 00:00:03,000
- Bonjour, Marie.
- Salut, Jean, comment vas-tu ?

2
00:00:04,000 --> 00:00:06,000
Tu viens
ce soir ?
- Oui.
"""


def test_each_speaker_turn_of_a_cue_is_translated_alone_and_keeps_its_line():
    upper = Upper()
    out = list(srt.parse(translate_formatted(upper, TURNS.encode(), "srt").decode()))
    assert upper.seen == ["Bonjour, Marie.", "Salut, Jean, comment vas-tu ?", "Tu viens ce soir ?", "Oui."]
    assert out[0].content == "- BONJOUR, MARIE.\n- SALUT, JEAN, COMMENT VAS-TU ?"
    assert out[1].content == "TU VIENS\nCE SOIR ?\n- OUI."  # a turn wrapped over two lines stays so


def test_webvtt_voices_on_their_own_lines_are_turns_too():
    upper = Upper()
    cue = "WEBVTT\n\n00:01.000 --> 00:02.000\n<v Marie>Bonjour Jean\n<v Jean>salut toi\n"
    out = translate_formatted(upper, cue.encode(), "vtt").decode()
    assert upper.seen == ["Bonjour Jean", "salut toi"]
    assert out.endswith("<v Marie>BONJOUR JEAN\n<v Jean>SALUT TOI\n")


def test_cue_tags_follow_their_words_where_the_translation_reorders_them():
    cue = "1\n00:00:01,000 --> 00:00:02,000\nLe <i>chat</i> noir\n"
    out = list(srt.parse(translate_formatted(Reverse(), cue.encode(), "srt").decode()))
    assert out[0].content == "NOIR <i>CHAT</i> LE"


def test_a_literal_angle_bracket_in_a_subrip_cue_is_text_not_a_tag():
    upper, reverse = Upper(), Reverse()
    cue = "1\n00:00:01,000 --> 00:00:02,000\nIl a dit << oui >> et a < b\n"
    out = list(srt.parse(translate_formatted(upper, cue.encode(), "srt").decode()))
    assert upper.seen == ["Il a dit << oui >> et a < b"] and out[0].content == "IL A DIT << OUI >> ET A < B"
    reordered = list(srt.parse(translate_formatted(reverse, cue.encode(), "srt").decode()))[0].content
    assert "/" not in reordered and sorted(reordered.replace(" ", "")) == sorted("ILADIT<<OUI>>ETA<B")  # its own marks


def test_wrapping_keeps_a_literal_angle_bracket_and_never_parts_a_word_from_its_tags():
    assert wrap_evenly("a < b c d", 2) == ["a < b", "c d"]
    assert wrap_evenly("l'<i>homme</i>s est là", 2) == ["l'<i>homme</i>s", "est là"]


def test_a_tag_opened_before_a_turns_dash_is_closed_where_its_words_go():
    cue = "1\n00:00:01,000 --> 00:00:02,000\n<i>- Bonjour Marie</i> et Jean\n- Oui.\n"
    kept = list(srt.parse(translate_formatted(Upper(), cue.encode(), "srt").decode()))[0].content
    assert kept == "<i>- BONJOUR MARIE</i> ET JEAN\n- OUI."  # where the words stay, the tag stays before the dash
    moved = list(srt.parse(translate_formatted(Reverse(), cue.encode(), "srt").decode()))[0].content
    assert moved == "- JEAN ET <i>MARIE BONJOUR</i>\n- OUI."

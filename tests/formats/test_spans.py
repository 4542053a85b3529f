"""The one mechanism for inline markup (mt/formats/spans.py): every span and void that goes in comes
out, nested as it was, on the target words its source words align to."""

import re

from mt.formats.spans import Aligned, Element, Segment, Span, Void, place, tags_of, text_of


def words(text):
    return [m.span() for m in re.finditer(r"\S+", text)]


SOURCE, TARGET = "le chat noir dort", "the black cat sleeps"
LINKS = [(0, 0), (1, 2), (2, 1), (3, 3)]  # chat -> cat, noir -> black: the adjective moves


def aligned(links=LINKS, target=TARGET):
    return Aligned(target, words(SOURCE), words(target), links)


def test_a_span_goes_around_the_words_aligned_to_its_own():
    out = place(Segment(SOURCE, [Span(8, 12, "b")]), aligned())
    assert out == ["the ", Element("b", ["black"]), " cat sleeps"]


def test_siblings_follow_their_words_and_nested_spans_stay_nested():
    seg = Segment(SOURCE, [Span(3, 12, "a"), Span(3, 7, "b"), Span(8, 12, "i")])  # <a><b>chat</b> <i>noir</i></a>
    out = place(seg, aligned())
    assert out == ["the ", Element("a", [Element("i", ["black"]), " ", Element("b", ["cat"])]), " sleeps"]


def test_nothing_is_dropped_where_the_alignment_says_nothing():
    within_p = frozenset({0})
    seg = Segment(SOURCE, [Span(0, 17, "p"), Span(3, 12, "b"), Span(8, 12, "i")], [Void(17, "br", within_p)])
    for target in (aligned(links=[]), Aligned("")):
        out = place(Segment(seg.text, seg.spans, [*seg.voids, Void(0, "img", within_p)]), target)
        assert sorted(tags_of(out)) == ["b", "br", "i", "img", "p"] and text_of(out) == target.text
        p = next(n for n in out if isinstance(n, Element) and n.tag == "p")
        assert tags_of(p.children)[:2] == ["img", "b"] and tags_of(p.children[1].children) == ["i"]


def test_a_void_follows_the_word_before_it_and_keeps_its_parent_and_spacing():
    inside = Void(12, "br", frozenset({0}))  # <b>noir<br></b>
    assert place(Segment(SOURCE, [Span(8, 12, "b")], [inside]), aligned())[1] == Element(
        "b", ["black", Element("br", void=True)]
    )
    after = place(Segment(SOURCE, [Span(8, 12, "b")], [Void(12, "br")]), aligned())  # <b>noir</b><br>
    assert after[1:3] == [Element("b", ["black"]), Element("br", void=True)]
    spaced = place(Segment("voir le code ici", [], [Void(8, "code")]), Aligned("SEE THE HERE", words("voir le ici")))
    assert text_of(spaced) == "SEE THE HERE"


def test_a_span_grows_to_whole_words_and_a_breaking_void_takes_the_place_of_its_space():
    target = "the blackbird sings"
    pieces = [(0, 3), (4, 9), (9, 13), (14, 19)]  # "black" and "bird": one word in two tokens
    out = place(
        Segment("le merle chante", [Span(3, 8, "b")]), Aligned(target, words("le merle chante"), pieces, [(1, 1)])
    )
    assert out == ["the ", Element("b", ["blackbird"]), " sings"]
    broken = place(
        Segment("un deux", [], [Void(2, "br", breaking=True)]),
        Aligned("one two", words("un deux"), words("one two"), [(0, 0), (1, 1)]),
    )
    assert broken == ["one", Element("br", void=True), "two"]


def test_a_line_break_between_two_translated_sentences_goes_between_their_translations():
    source, target = "chat noir Chien", "black cat Dog"  # two sentences, a line break between them
    seg = Segment(source, voids=[Void(9, "br", breaking=True, line=True)])
    links = [(0, 1), (1, 0), (2, 2)]  # noir -> black comes first: the word before the break is not last
    out = place(seg, Aligned(target, words(source), words(target), links, pieces=[(0, 9, 2), (10, 15, 3)]))
    assert out == ["black cat", Element("br", void=True), "Dog"]
    within = place(seg, Aligned(target, words(source), words(target), links))  # one piece: by the word before
    assert within == ["black", Element("br", void=True), "cat Dog"]


def test_an_empty_span_where_a_sibling_starts_stays_beside_it_as_its_reader_nested_it():
    # <a1><img></a1><a2>Accueil</a2>: both spans start at 0; the reader says neither holds the other
    seg = Segment("Accueil", [Span(0, 0, "a1", frozenset()), Span(0, 7, "a2", frozenset())])
    seg.voids.append(Void(0, "img", frozenset({0}), opened=1))
    out = place(seg, Aligned("HOME", [(0, 7)], [(0, 4)], [(0, 0)]))
    assert out == [Element("a1", [Element("img", void=True)]), Element("a2", ["HOME"])]


def test_a_void_outside_a_span_stays_outside_it_where_the_target_puts_the_span_around_it():
    # <img><b>le chat</b> dort -> the image touches "le", which the target puts inside the bold
    seg = Segment("le chat dort", [Span(0, 7, "b", frozenset())], [Void(0, "img", opened=0)])
    target = "sleeps cat the"
    out = place(seg, Aligned(target, words(seg.text), words(target), [(0, 2), (1, 1), (2, 0)]))
    assert out == ["sleeps ", Element("img", void=True), Element("b", ["cat the"])]

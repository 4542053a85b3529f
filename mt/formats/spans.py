"""Inline markup, put back after translation: the one mechanism every format shares.

A format hands over each block of its text as a `Segment`: the plain text the model reads, with the
inline markup over it as `Span`s (bold, a link, a run's formatting: `tag` is the format's own
object) and `Void`s (a line break, an image, a code span left untranslated). The text is translated
as plain text; `place` then puts each span around the target words aligned to its source words and
each void after the target word aligned to the source word before it, and returns the target as a
tree of text and `Element`s for the format to write out.

Every span and void that went in comes out, nested as in the source: where the alignment says
nothing of a span's words, the span stays, empty, where its neighbours put it. Siblings may change
order, as the target language orders their words. Alignments link tokens (subword pieces); a span
grows to whole target words, so bold never stops inside a word.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Span:
    """Inline markup over `text[start:end]` of a segment, inside the spans numbered `within` (None:
    unknown, then told by the offsets; an empty span at another's edge cannot be, so readers that
    know the nesting say it)."""

    start: int
    end: int
    tag: Any
    within: frozenset[int] | None = None


@dataclass(frozen=True)
class Void:
    """Markup without text at character `at` of a segment, inside the spans numbered `within`. A
    `breaking` void (a line break, a tab) stands for the space the segment's text has after it; a
    `line` break before a capital letter ends a sentence (an address, the items of a cell). `opened`
    counts the spans listed before it in document order, which says whether it comes before or after
    an empty span at the same place (None: unknown, after). One that touches the word after it, and
    not the one before (an image before a caption's first word), goes with that word: `glued` says
    whether it does, where the text around it cannot (None: it can; `add_text` says so)."""

    at: int
    tag: Any
    within: frozenset[int] = frozenset()
    breaking: bool = False
    line: bool = False
    opened: int | None = None
    glued: bool | None = None


@dataclass
class Segment:
    """One block's text, translated as plain text, with its inline markup. `spans` nest (no two
    overlap unless one holds the other), listed parents before children."""

    text: str
    spans: list[Span] = field(default_factory=list)
    voids: list[Void] = field(default_factory=list)

    @property
    def plain(self) -> bool:
        return not self.spans and not self.voids

    def add_text(self, text: str) -> None:
        """Text added, one space where markup taken out left two: a void between them, in the
        space that was there on both sides, is then glued to neither word."""
        if text.startswith(" ") and self.text.endswith(" "):
            text = text[1:]
            self.voids = [replace(v, glued=False) if v.at == len(self.text) else v for v in self.voids]
        self.text += text

    def glued(self, void: Void) -> bool:
        """Whether `void` touches the word after it, not the one before."""
        if void.glued is not None:
            return void.glued
        text, at = self.text, void.at
        return at < len(text) and not text[at].isspace() and (at == 0 or text[at - 1].isspace())


@dataclass
class Element:
    """A span or void in the translated tree: its tag and what it holds (text and elements)."""

    tag: Any
    children: list = field(default_factory=list)
    void: bool = False


@dataclass
class Aligned:
    """A translated segment: the target text, where each source token lies in the segment's text and
    each target token in the target text, as (start, end) characters, and (source, target) links;
    with the pieces it was translated in, each as (source start, source end) characters and the
    number of target tokens at its end."""

    text: str
    source_units: list[tuple[int, int]] = field(default_factory=list)
    target_units: list[tuple[int, int]] = field(default_factory=list)
    links: list[tuple[int, int]] = field(default_factory=list)
    pieces: list[tuple[int, int, int]] = field(default_factory=list)


@dataclass
class _Node:
    span: Span
    index: int = -1  # in the segment's spans
    children: list[_Node] = field(default_factory=list)
    lo: int = 0  # target tokens [lo, hi); lo == hi: empty, in the gap before token lo
    hi: int = 0
    start: int = 0  # characters of the target text
    end: int = 0
    voids: list[tuple[int, Void]] = field(default_factory=list)


def _tree(spans: list[Span]) -> list[_Node]:
    """The spans as a forest: each under its innermost holder, as its reader says (`within`) or,
    where it does not, the innermost earlier span whose offsets hold it."""
    nodes = [_Node(span, i) for i, span in enumerate(spans)]
    inferred = _holders(spans)
    roots: list[_Node] = []
    for i, node in enumerate(nodes):
        within = spans[i].within
        parent = inferred[i] if within is None else (max(within) if within else None)
        (nodes[parent].children if parent is not None else roots).append(node)
    return roots


def _holders(spans: list[Span]) -> list[int | None]:
    """Each span's innermost holder by offsets alone: the innermost earlier span holding it."""
    holder: list[int | None] = [None] * len(spans)
    stack: list[int] = []
    for i in sorted(range(len(spans)), key=lambda i: (spans[i].start, -spans[i].end, i)):
        while stack and not (spans[stack[-1]].start <= spans[i].start and spans[i].end <= spans[stack[-1]].end):
            stack.pop()
        holder[i] = stack[-1] if stack else None
        stack.append(i)
    return holder


class _Placer:
    def __init__(self, segment: Segment, aligned: Aligned):
        self.segment, self.a = segment, aligned
        self.n = len(aligned.target_units)
        self.targets: dict[int, list[int]] = {}
        for s, t in aligned.links:
            self.targets.setdefault(s, []).append(t)

    def units_in(self, start: int, end: int) -> list[int]:
        return [i for i, (a, b) in enumerate(self.a.source_units) if a < end and b > start and b > a]

    def gap(self, at: int, forward: bool = False) -> int:
        """The target gap for source character `at`: after the target token of the nearest aligned
        source token before it (after its piece's translation, where `at` is past the piece: a line
        break between two sentences), else before that of the nearest one after it; `forward`, that
        one first (an image glued to the word after it)."""
        units = self.a.source_units
        before = [i for i, (_, b) in enumerate(units) if b <= at and i in self.targets]
        after = [i for i, (a, _) in enumerate(units) if a >= at and i in self.targets]
        if forward and after:
            return min(self.targets[after[0]])
        if before:
            start = units[before[-1]][0]
            ends = [t for s, e, t in self.a.pieces if s <= start < e and at >= e]
            return ends[0] if ends else max(self.targets[before[-1]]) + 1
        return min(self.targets[after[0]]) if after else (0 if at <= 0 else self.n)

    def aligned_to(self, node: _Node) -> list[int]:
        """The target tokens aligned to a span's source tokens."""
        return sorted({t for s in self.units_in(node.span.start, node.span.end) for t in self.targets.get(s, [])})

    def _glued(self, i: int) -> bool:
        """Whether target tokens i and i + 1 are parts of one word."""
        (_, end), (start, _) = self.a.target_units[i], self.a.target_units[i + 1]
        text = self.a.text
        return end == start and 0 < end < len(text) and text[end - 1].isalnum() and text[start].isalnum()

    def _range(self, hit: list[int], lo: int, hi: int) -> tuple[int, int]:
        """The tokens from the first to the last of `hit`, widened to whole words within [lo, hi)."""
        a, b = hit[0], hit[-1] + 1
        while a > lo and self._glued(a - 1):
            a -= 1
        while b < hi and self._glued(b - 1):
            b += 1
        return a, b

    def fit(self, nodes: list[_Node], lo: int, hi: int) -> None:
        """Each node's range inside [lo, hi), then its children's inside it. Siblings never overlap:
        the narrower choose first, and a wider one keeps the free stretch holding most of its
        tokens. A span aligned to nothing stays, empty, at the gap its source position maps to, or
        beside the sibling whose words are there, on the side it was on in the source."""
        hits = {id(n): [t for t in self.aligned_to(n) if lo <= t < hi] for n in nodes}
        taken: list[tuple[int, int, _Node]] = []
        for node in sorted(nodes, key=lambda n: _width(hits[id(n)])):
            free = _free(lo, hi, [(a, b) for a, b, _ in taken])
            counts = [sum(a <= t < b for t in hits[id(node)]) for a, b in free]
            if counts and max(counts) > 0:
                a, b = free[counts.index(max(counts))]
                node.lo, node.hi = self._range([t for t in hits[id(node)] if a <= t < b], a, b)
            else:
                gap = min(max(self.gap(node.span.start), lo), hi)
                node.lo = node.hi = _beside(node, gap, taken)
            taken.append((node.lo, node.hi, node))
        nodes.sort(key=lambda n: (n.lo, n.hi, n.span.start))
        for node in nodes:
            self.fit(node.children, node.lo, node.hi)

    def chars(self, lo: int, hi: int) -> tuple[int, int]:
        units = self.a.target_units
        if lo < hi:
            return units[lo][0], units[hi - 1][1]
        at = units[lo - 1][1] if lo > 0 else (units[0][0] if units else 0)
        return at, at

    def locate(self, nodes: list[_Node]) -> None:
        for node in nodes:
            node.start, node.end = self.chars(node.lo, node.hi)
            self.locate(node.children)


def _width(hits: list[int]) -> tuple[bool, int]:
    """Which sibling chooses its range first: those aligned to something, the narrower first."""
    return not hits, hits[-1] - hits[0] if hits else 0


def _beside(node: _Node, gap: int, taken: list[tuple[int, int, _Node]]) -> int:
    """Where an empty span goes: at `gap`, or where a sibling's range holds it, at that sibling's
    edge on the side the span was on in the source."""
    for a, b, other in taken:
        if a < gap < b:
            return a if (node.span.start, node.index) <= (other.span.start, other.index) else b
    return gap


def _free(lo: int, hi: int, taken: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The stretches of [lo, hi) that no taken range covers."""
    out, at = [], lo
    for a, b in sorted(r for r in taken if r[0] < r[1]):
        if a > at:
            out.append((at, a))
        at = max(at, b)
    return out + ([(at, hi)] if at < hi else [])


def _adopt(root: _Node, void: Void, at: int) -> None:
    """Put `void` (at target character `at`) where the source had it: inside the spans it was
    inside (at their nearest edge, where their words went elsewhere), and outside the others (at
    the edge on the side it was on, where the target puts their words around it)."""
    node = root
    while True:
        inner = None
        for child in node.children:
            if child.index in void.within:
                inner = child
            elif child.start < at < child.end:
                at = child.start if void.at <= child.span.start else child.end
        if inner is None:
            node.voids.append((at, void))
            return
        at, node = min(max(at, inner.start), inner.end), inner


def _order(item) -> tuple:
    """Where a child goes among its siblings at one target place: by its source place, then a void
    before a span with words (which cannot hold it), and in document order beside an empty one."""
    if isinstance(item[2], Void):
        opened = item[2].opened
        return item[0], item[1], 0, float("inf") if opened is None else opened - 0.5
    span = item[2].span
    return item[0], item[1], int(span.end > span.start), item[2].index


def _render(node: _Node, text: str, source: str) -> list:
    items = [(c.start, c.span.start, c) for c in node.children] + [(at, v.at, v) for at, v in node.voids]
    out, cursor = [], node.start
    for at, _, item in sorted(items, key=_order):
        if at > cursor:
            out.append(text[cursor:at])
            cursor = at
        if isinstance(item, Void):
            out.append(Element(item.tag, void=True))
            if item.breaking:  # it is the space between the words around it
                if len(out) > 1 and isinstance(out[-2], str) and out[-2].endswith(" "):
                    out[-2] = out[-2][:-1]
                cursor += text[cursor : cursor + 1] == " " and cursor < node.end
                continue
            spaced = item.at > 0 and source[item.at - 1] == " ", item.at < len(source) and source[item.at] == " "
            if spaced[0] and len(out) > 1 and isinstance(out[-2], str) and not out[-2].endswith(" "):
                out.insert(len(out) - 1, " ")  # the spaces the source had around it, where the target has none
            if spaced[1] and not text[cursor : cursor + 1].isspace() and cursor < node.end:
                out.append(" ")
        else:
            out.append(Element(item.span.tag, _render(item, text, source)))
            cursor = max(cursor, item.end)
    if node.end > cursor:
        out.append(text[cursor : node.end])
    return out


def place(segment: Segment, aligned: Aligned) -> list:
    """The translated segment as a list of text and `Element`s: every span and void of `segment`
    placed on the target by `aligned`'s links (see the module notes)."""
    if segment.plain:
        return [aligned.text] if aligned.text else []
    placer = _Placer(segment, aligned)
    root = _Node(Span(0, len(segment.text), None), children=_tree(segment.spans))
    root.lo, root.hi = 0, placer.n
    placer.fit(root.children, 0, placer.n)
    placer.locate(root.children)
    root.start, root.end = 0, len(aligned.text)
    for void in segment.voids:
        glued = segment.glued(void)
        gap = placer.gap(void.at, forward=glued)
        units = aligned.target_units
        _adopt(root, void, units[gap][0] if glued and gap < placer.n else placer.chars(gap, gap)[0])
    return _render(root, aligned.text, segment.text)


def text_of(nodes: list) -> str:
    """The text of a translated tree, markup left out."""
    return "".join(n if isinstance(n, str) else text_of(n.children) for n in nodes)


def tags_of(nodes: list) -> list:
    """The tags of a translated tree in document order (each element once, where it opens)."""
    out = []
    for n in nodes:
        if isinstance(n, Element):
            out.append(n.tag)
            out += tags_of(n.children)
    return out

"""Which text of a markup tree is translated, and where it goes back: the walk that HTML (read by
BeautifulSoup) and XML (read by lxml) share, over a `Tree` that says how its library's nodes look.

Block elements bound the segments; the inline elements inside one become its spans, and line
breaks, images, comments and anything not to be translated its voids, moved whole. Untouched
blocks (scripts, styles) are left as they are, as is the head but for its title. Whitespace inside
a segment is read as HTML renders it, one space.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

from mt.formats.spans import Segment, Span, Void
from mt.formats.vocabulary import Vocabulary


class Tree(Protocol):
    """How a parsing library's nodes are read."""

    def content(self, node) -> list:
        """The node's children in order: its text as items that `is_text` says are text."""

    def is_text(self, item) -> bool:
        """Whether a child is text (a comment, a doctype, an element is not)."""

    def name(self, node) -> str:
        """An element's name without prefix, lower-cased; "" for what is not an element."""

    def get(self, node, attribute: str) -> str | None:
        """An element's attribute as one string, or None."""


@dataclass
class Run:
    """A segment's place: the children `start` to `end` of `container`, as `items` lists them."""

    container: Any
    items: list
    start: int
    end: int


@dataclass
class Attribute:
    """A segment's place: an attribute of an element."""

    node: Any
    name: str


class Blocks:
    """The segments of a tree (`segments`) and each one's place (`places`, a Run or an Attribute)."""

    def __init__(self, tree: Tree, vocabulary: Vocabulary, root):
        self.tree, self.vocabulary = tree, vocabulary
        self.segments: list[Segment] = []
        self.places: list[Run | Attribute] = []
        # By id, with the node itself: lxml makes a node's Python object on demand and frees it when
        # unused, so an id alone could be taken by another element; held here, it stays this node's.
        self._holds_block: dict[int, tuple[Any, bool]] = {}
        self._collect(root)

    def _untouched(self, node) -> bool:
        get = self.tree.get
        classes = (get(node, "class") or "").split()
        no = (get(node, "translate") or "").lower() == "no"
        return self.tree.name(node) in self.vocabulary.untouched or no or "notranslate" in classes

    def _element(self, item) -> bool:
        return not self.tree.is_text(item) and self.tree.name(item) != ""

    def _is_block(self, node) -> bool:
        if not self._element(node):
            return False
        key = id(node)
        if key not in self._holds_block:
            named = self.tree.name(node) in self.vocabulary.blocks
            inner = [c for c in self.tree.content(node) if not self._element(c) or not self._inline(c)]
            self._holds_block[key] = (node, named or any(self._is_block(c) for c in inner))
        return self._holds_block[key][1]

    def _inline(self, node) -> bool:
        return self.tree.name(node) in self.vocabulary.inline

    def _collect(self, container) -> None:
        items = self.tree.content(container)
        start = 0
        for k, child in enumerate(items):
            if self._element(child) and self._untouched(child):
                if self.tree.name(child) in self.vocabulary.untouched_blocks or (
                    self._is_block(child) and not self._inline(child)
                ):
                    self._flush(Run(container, items, start, k))  # a block left alone
                    start = k + 1
            elif self._is_block(child):
                self._flush(Run(container, items, start, k))
                start = k + 1
                self._attributes(child)
                if self.tree.name(child) == "head":
                    self._titles(child)
                else:
                    self._collect(child)
        self._flush(Run(container, items, start, len(items)))

    def _titles(self, node) -> None:
        for child in self.tree.content(node):
            if self._element(child) and self.tree.name(child) == "title":
                items = self.tree.content(child)
                self._flush(Run(child, items, 0, len(items)))
            elif self._element(child):
                self._titles(child)

    def _attributes(self, node) -> None:
        for name in self.vocabulary.attributes:
            value = self.tree.get(node, name)
            if value and value.strip():
                self.segments.append(Segment(value))
                self.places.append(Attribute(node, name))

    def _flush(self, run: Run) -> None:
        """One segment of consecutive inline children, unless they hold no text."""
        segment = Segment("")
        for child in run.items[run.start : run.end]:
            self._add(child, segment, [])
        if segment.text.strip():
            self.segments.append(segment)
            self.places.append(run)

    def _add(self, node, segment: Segment, within: list[int]) -> None:
        if self.tree.is_text(node):  # as HTML renders it; a no-break space stays
            segment.add_text(re.sub(r"[ \t\n\r\f]+", " ", str(node)))
            return
        element, name = self._element(node), self.tree.name(node)
        untouched = element and self._untouched(node)
        if not element or untouched or name in self.vocabulary.voids:
            if element and not untouched:
                self._attributes(node)
            breaking = name in self.vocabulary.breaking and not segment.text.endswith(" ")
            line = name in self.vocabulary.lines
            at, opened = len(segment.text), len(segment.spans)
            segment.voids.append(Void(at, node, frozenset(within), breaking, line, opened))
            segment.text += " " if breaking else ""
            return
        self._attributes(node)
        index, start = len(segment.spans), len(segment.text)
        segment.spans.append(Span(start, start, node, frozenset(within)))
        for child in self.tree.content(node):
            self._add(child, segment, within + [index])
        segment.spans[index] = Span(start, len(segment.text), node, frozenset(within))

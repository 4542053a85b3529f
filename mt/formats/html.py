"""HTML pages: the text of a page translated, its markup kept.

Parsed with BeautifulSoup and Python's own HTML parser, which keeps a fragment a fragment and
repairs what is malformed without dropping text. What is translated is mt/formats/blocks.py's walk
with HTML's vocabulary; `alt`, `title` and `placeholder` attributes are translated too. Characters
the source wrote as entities are written as the same entities, attributes keep their order, and
void elements are closed as the source closed them. XHTML is XML: mt/formats/xhtml.py reads it.
"""

from __future__ import annotations

import re

from mt.formats.blocks import Attribute, Blocks
from mt.formats.entities import escaping
from mt.formats.spans import Element
from mt.formats.vocabulary import HTML


class _Soup:
    """BeautifulSoup's nodes as mt/formats/blocks.py reads them."""

    def content(self, node) -> list:
        return list(node.children)

    def is_text(self, item) -> bool:
        from bs4 import CData, NavigableString

        return type(item) in (NavigableString, CData)  # comments and doctypes are strings too

    def name(self, node) -> str:
        from bs4 import Tag

        return (node.name or "").split(":")[-1].lower() if isinstance(node, Tag) else ""

    def get(self, node, attribute: str) -> str | None:
        value = node.get(attribute)
        return " ".join(value) if isinstance(value, list) else value  # class is a list


class _Page:
    """A parsed page, its segments, and how their translations go back into it."""

    def __init__(self, text: str):
        from bs4 import BeautifulSoup

        self.soup = BeautifulSoup(text, "html.parser")
        self.blocks = Blocks(_Soup(), HTML, self.soup)

    def put_back(self, translated: list[list]) -> None:
        for segment, place, nodes in zip(self.blocks.segments, self.blocks.places, translated):
            if isinstance(place, Attribute):
                place.node[place.name] = "".join(n if isinstance(n, str) else "" for n in nodes)
                continue
            run = place.items[place.start : place.end]
            marker = self.soup.new_string("")  # where the run starts: its first node may be a void that moves
            run[0].insert_before(marker)
            for new in self._build(nodes):
                marker.insert_before(new)
            marker.extract()
            for old in run:
                if old.parent is not None and not any(old is v.tag for v in segment.voids):
                    old.extract()

    def _build(self, nodes: list) -> list:
        from bs4 import NavigableString

        out = []
        for n in nodes:
            if isinstance(n, str):
                out.append(NavigableString(n))
            elif n.void:
                out.append(n.tag.extract() if n.tag.parent is not None else n.tag)
            else:
                out.append(self._shell(n))
        return out

    def _shell(self, element: Element):
        """A copy of a span's element (name, attributes, in order) holding the translated children."""
        old = element.tag
        new = self.soup.new_tag(old.name, attrs=dict(old.attrs))
        new.prefix, new.namespace = old.prefix, old.namespace
        for child in self._build(element.children):
            new.append(child)
        return new


def _formatter(source: str):
    """Writes the page back: attributes in their order, void elements as the source closed them,
    and characters the source wrote as entities as those entities."""
    from bs4.formatter import HTMLFormatter

    slash = "/" if re.search(r"<(?:br|img|hr|input|meta|link)\b[^>]*/>", source, re.I) else None

    class Formatter(HTMLFormatter):
        def attributes(self, tag):
            return list(tag.attrs.items())  # in the source's order, where BeautifulSoup sorts

    return Formatter(entity_substitution=escaping(source), void_element_close_prefix=slash)


def translate_html(text: str, translate_segments, target_lang: str | None = None) -> str:
    """A page (or fragment) with its text translated by `translate_segments` (segments in, trees of
    text and Elements out) in one call, and its markup kept: see the module notes. A page's `lang`
    becomes `target_lang`."""
    page = _Page(text)
    segments = page.blocks.segments
    page.put_back(translate_segments(segments) if segments else [])
    return _written(page, text, target_lang)


def _written(page: _Page, text: str, target_lang: str | None) -> str:
    from bs4 import Doctype

    root = page.soup.find("html")
    for name in ("lang", "xml:lang"):
        if target_lang and root is not None and root.get(name):
            root[name] = target_lang
    for doctype in [node for node in page.soup.contents if isinstance(node, Doctype)]:
        after = doctype.next_sibling  # BeautifulSoup writes a line break after a doctype itself
        if isinstance(after, str) and after.startswith("\n"):
            after.replace_with(after[1:]) if len(after) > 1 else after.extract()
    return page.soup.decode(formatter=_formatter(text))


def translate(text: str, job) -> str:
    """An HTML page translated (the html format's adapter)."""
    return translate_html(text, job.segments, job.target_lang)

"""HTML and XHTML: the text of a page translated, its markup kept.

Parsed with BeautifulSoup (Python's own HTML parser, which keeps a fragment a fragment and repairs
what is malformed without dropping text; lxml's XML parser for XHTML, which keeps case and
namespaces). Block elements (paragraphs, list items, cells, headings, ...) bound the segments; the
inline elements inside one (bold, links, spans) become its spans, and line breaks, images, comments
and anything not to be translated (code, `translate="no"`, class `notranslate`) its voids, moved
whole. `script`, `style`, `pre`, `code` and their like are left as they are, as is the head but for
its title; `alt`, `title` and `placeholder` attributes are translated. Characters the source wrote
as entities are written as the same entities, attributes keep their order, and whitespace inside a
segment is read as HTML renders it, one space.
"""

from __future__ import annotations

import html as html_lib
import html.entities
import re
from dataclasses import dataclass

from mt.errors import UserError
from mt.formats.spans import Element, Segment, Span, Void


@dataclass(frozen=True)
class Vocabulary:
    """What a markup language's elements are to a translation, by name without prefix: blocks bound
    segments (as does any element holding one); untouched elements are kept as they are, as
    boundaries where they are `untouched_blocks` or hold a block, else as voids (`inline` ones even
    holding a block: a comment on a word); `voids` move whole, and `breaking` ones part two words;
    `attributes` are translated."""

    blocks: frozenset[str]
    untouched: frozenset[str]
    untouched_blocks: frozenset[str]
    voids: frozenset[str]
    breaking: frozenset[str]
    attributes: tuple[str, ...] = ()
    inline: frozenset[str] = frozenset()
    lines: frozenset[str] = frozenset()  # voids that break a line


def element_names(text: str) -> frozenset[str]:
    return frozenset(text.split())


HTML = Vocabulary(
    blocks=element_names(
        "address article aside blockquote body caption center dd details dialog dir div dl dt fieldset figcaption "
        "figure footer form frameset h1 h2 h3 h4 h5 h6 head header hgroup hr html legend li main menu nav ol "
        "optgroup option p section summary table tbody td tfoot th thead title tr ul"
    ),
    untouched=element_names("script style pre code kbd samp var textarea template svg math noscript iframe object"),
    untouched_blocks=element_names("script style pre textarea template noscript"),
    voids=element_names("area base br col embed hr img input link meta param source track wbr"),
    breaking=element_names("br hr"),
    attributes=("alt", "title", "placeholder"),
    lines=element_names("br"),
)
_ENTITY = re.compile(r"&(#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")


_TAG = re.compile(r"<[^>]*>|&[^;\s]{1,32};")


def _numeric_entities(text: str) -> str:
    """HTML's named entities (`&nbsp;`) as numeric references, which an XML parser reads without a
    DTD (it drops what it cannot resolve); XML's own five stay as they are."""

    def numeric(m):
        name = m.group(1)
        code = html_lib.entities.name2codepoint.get(name)
        return m.group() if code is None or name in ("amp", "lt", "gt", "quot", "apos") else f"&#{code};"

    return re.sub(r"&([A-Za-z][A-Za-z0-9]*);", numeric, text)


def _name(tag) -> str:
    return (tag.name or "").split(":")[-1].lower()


def _untouched(tag, vocabulary: Vocabulary) -> bool:
    classes = tag.get("class") or []
    classes = classes.split() if isinstance(classes, str) else classes
    return _name(tag) in vocabulary.untouched or tag.get("translate", "").lower() == "no" or "notranslate" in classes


class _Page:
    """A parsed page and what in it is to be translated: segments, each with where it goes back."""

    def __init__(self, text: str, xhtml: bool, vocabulary: Vocabulary = HTML):
        from bs4 import BeautifulSoup

        self.xhtml, self.vocabulary = xhtml, vocabulary
        self.soup = BeautifulSoup(_numeric_entities(text) if xhtml else text, "xml" if xhtml else "html.parser")
        if xhtml and len(self.soup.get_text()) < len(_TAG.sub("", text)) // 2:
            raise UserError("an XHTML document could not be read whole (an internal DTD subset?); nothing was written")
        self.segments: list[Segment] = []
        self.runs: list[list] = []  # per text segment: the nodes it replaces
        self.attributes: list[tuple] = []  # per attribute segment: (tag, attribute name)
        self._holds_block: dict[int, bool] = {}
        self._collect(self.soup)

    def _is_block(self, node) -> bool:
        from bs4 import Tag

        if not isinstance(node, Tag):
            return False
        key = id(node)
        if key not in self._holds_block:
            named = _name(node) in self.vocabulary.blocks
            inner = [c for c in node.children if not (isinstance(c, Tag) and _name(c) in self.vocabulary.inline)]
            self._holds_block[key] = named or any(self._is_block(c) for c in inner)
        return self._holds_block[key]

    def _collect(self, container) -> None:
        from bs4 import Tag

        run: list = []
        for child in list(container.children):
            if isinstance(child, Tag) and _untouched(child, self.vocabulary):
                inline = _name(child) in self.vocabulary.inline
                if _name(child) in self.vocabulary.untouched_blocks or (self._is_block(child) and not inline):
                    self._flush(run)  # a block left alone
                    run = []
                else:
                    run.append(child)  # among text: a void, moved whole
            elif self._is_block(child):
                self._flush(run)
                run = []
                self._attributes(child)
                if _name(child) != "head":
                    self._collect(child)
                else:
                    self._collect_title(child)
            else:
                run.append(child)
        self._flush(run)

    def _collect_title(self, head) -> None:
        for title in head.find_all("title"):
            self._flush(list(title.children))

    def _attributes(self, tag) -> None:
        for name in self.vocabulary.attributes:
            value = tag.get(name)
            if isinstance(value, str) and value.strip():
                self.segments.append(Segment(value))
                self.attributes.append((tag, name))

    def _flush(self, run: list) -> None:
        """One segment of consecutive inline nodes, unless they hold no text."""
        segment = Segment("")
        for node in run:
            self._add(node, segment, [])
        if segment.text.strip():
            self.segments.append(segment)
            self.runs.append(run)
            self.attributes.append(None)

    def _add(self, node, segment: Segment, within: list[int]) -> None:
        from bs4 import CData, NavigableString, Tag

        if type(node) in (NavigableString, CData):  # text; comments and the like are voids
            text = re.sub(r"[ \t\n\r\f]+", " ", str(node))  # as HTML renders it; a no-break space stays
            if text.startswith(" ") and segment.text.endswith(" "):
                text = text[1:]
            segment.text += text
            return
        untouched = isinstance(node, Tag) and _untouched(node, self.vocabulary)
        if not isinstance(node, Tag) or untouched or _name(node) in self.vocabulary.voids:
            if isinstance(node, Tag) and not untouched:
                self._attributes(node)
            breaking = _name(node) in self.vocabulary.breaking and not segment.text.endswith(" ")
            line = _name(node) in self.vocabulary.lines
            segment.voids.append(Void(len(segment.text), node, frozenset(within), breaking, line))
            segment.text += " " if breaking else ""
            return
        self._attributes(node)
        index, start = len(segment.spans), len(segment.text)
        segment.spans.append(Span(start, start, node))
        for child in list(node.children):
            self._add(child, segment, within + [index])
        segment.spans[index] = Span(start, len(segment.text), node)

    def put_back(self, translated: list[list]) -> None:
        runs = iter(self.runs)
        for segment, where, nodes in zip(self.segments, self.attributes, translated):
            if where is not None:
                tag, name = where
                tag[name] = "".join(n if isinstance(n, str) else "" for n in nodes)
                continue
            run = next(runs)
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


class _Writer:
    """Writes the page back: attributes in their order, void elements as the source wrote them,
    and characters the source wrote as entities as those entities."""

    def __new__(cls, source: str, xhtml: bool, escape: bool = True):
        from bs4.formatter import HTMLFormatter, XMLFormatter

        entities = {}
        for m in _ENTITY.finditer(source):
            char = html_lib.unescape(m.group())
            if char != m.group() and char not in "&<>\"'":
                entities.setdefault(char, m.group())
        pattern = re.compile("|".join(map(re.escape, entities))) if entities else None

        def substitute(text: str) -> str:
            if not escape:  # markup that is not HTML around the text (subtitles): the text as it is
                return text
            text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            return pattern.sub(lambda m: entities[m.group()], text) if pattern else text

        base = XMLFormatter if xhtml else HTMLFormatter
        slash = "/" if xhtml or re.search(r"<(?:br|img|hr|input|meta|link)\b[^>]*/>", source, re.I) else ""

        class Formatter(base):
            def attributes(self, tag):
                return list(tag.attrs.items())  # in the source's order, where BeautifulSoup sorts

        return Formatter(entity_substitution=substitute, void_element_close_prefix=slash or None)


def read_text(data: bytes, what: str) -> str:
    """A file's text: UTF-8 (a byte-order mark allowed), else a one-line error."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserError(f"{what} is not UTF-8 text (byte {e.start}); convert it first, e.g. with iconv") from None


def translate_html(text: str, translate_segments, xhtml: bool = False, target_lang: str | None = None) -> str:
    """`text` (a page or a fragment) with its text translated by `translate_segments` (segments in,
    trees of text and Elements out) and its markup kept: see the module notes."""
    return translate_html_many([text], translate_segments, xhtml, target_lang)[0]


def translate_html_many(
    texts: list[str],
    translate_segments,
    xhtml: bool = False,
    target_lang=None,
    escape: bool = True,
    vocabulary: Vocabulary = HTML,
) -> list[str]:
    """`translate_html` for many pages (an EPUB's chapters, a subtitle file's cues) in one call to
    `translate_segments`, so their sentences are batched together. `escape` off writes the text's
    `&` and `<` as they are, for HTML-like tags in a format that is not HTML (subtitles); another
    `vocabulary` reads XML that is not XHTML (OpenDocument's)."""
    pages = [_Page(text, xhtml, vocabulary) for text in texts]
    segments = [seg for page in pages for seg in page.segments]
    translated = translate_segments(segments) if segments else []
    at, out = 0, []
    for page, text in zip(pages, texts):
        page.put_back(translated[at : at + len(page.segments)])
        at += len(page.segments)
        out.append(_written(page, text, xhtml, target_lang, escape))
    return out


def _written(page: _Page, text: str, xhtml: bool, target_lang: str | None, escape: bool = True) -> str:
    root = page.soup.find("html")
    if target_lang and root is not None and root.get("lang"):
        root["lang"] = target_lang
    for doctype in _doctypes(page.soup):  # BeautifulSoup writes a line break after a doctype itself
        after = doctype.next_sibling
        if isinstance(after, str) and after.startswith("\n"):
            after.replace_with(after[1:]) if len(after) > 1 else after.extract()
    out = page.soup.decode(formatter=_Writer(text, xhtml, escape))
    if xhtml and not text.lstrip("\ufeff").startswith("<?xml"):
        out = out.split("?>", 1)[1].lstrip("\n")  # the declaration lxml's serialiser adds, where none was
    return out


def _doctypes(soup) -> list:
    from bs4 import Doctype

    return [node for node in soup.contents if isinstance(node, Doctype)]

"""XML documents (XHTML pages, EPUB chapters, OpenDocument parts) read and written with lxml.etree,
whose nodes carry their own namespaces: mt/formats/blocks.py's walk over the tree, the translations
put back by moving the very nodes that were read, and the document written again.

What stands before the root element (the XML declaration, the doctype, comments) is written as the
source wrote it. HTML's named entities, which an XML parser cannot resolve without a DTD, are read
as the characters they stand for, and every character the source wrote as an entity is written as
the same entity. The written document is parsed again and refused, in one line, where any element
or attribute name, or any namespace in scope, differs from the source's: a damaged file is never
handed back.
"""

from __future__ import annotations

import re
from collections import Counter

from lxml import etree

from mt.errors import UserError
from mt.formats.archives import XML, parse_xml
from mt.formats.blocks import Attribute, Blocks, Run
from mt.formats.entities import as_in_source, numeric
from mt.formats.spans import Element
from mt.formats.vocabulary import Vocabulary

_PROLOG = re.compile(r"\ufeff?(?:\s+|<\?.*?\?>|<!--.*?-->|<!DOCTYPE(?:[^\[>]|\[.*?\])*>)*", re.S)
_DECLARATION = re.compile(r"\ufeff?<\?xml\b.*?\?>", re.S)


class _Lxml:
    """lxml's nodes as mt/formats/blocks.py reads them: an element's text and its children's tails
    are the text among its children."""

    def content(self, node) -> list:
        out = [node.text] if node.text else []
        for child in node:
            out.append(child)
            if child.tail:
                out.append(child.tail)
        return out

    def is_text(self, item) -> bool:
        return isinstance(item, str)

    def name(self, node) -> str:
        return etree.QName(node).localname.lower() if isinstance(node.tag, str) else ""

    def get(self, node, attribute: str) -> str | None:
        return node.get(attribute)


def names(root) -> tuple[Counter, set]:
    """A tree's element and attribute names with their namespaces (how many of each), and every
    (prefix, namespace) its elements have in scope."""
    elements = [el for el in root.iter() if isinstance(el.tag, str)]
    counted = Counter(el.tag for el in elements) + Counter(f"@{key}" for el in elements for key in el.attrib)
    return counted, {item for el in elements for item in el.nsmap.items()}


def _as_read(text: str) -> bytes:
    """A document's text as the parser reads it: in UTF-8, so without the declaration, which may
    name another encoding, and with HTML's named entities as numeric references."""
    body = text[m.end() :] if (m := _DECLARATION.match(text)) else text.lstrip("\ufeff")
    return numeric(body).encode("utf-8")


class Document:
    """An XML document's text parsed, its segments under `vocabulary`, and its translation written."""

    def __init__(self, text: str, where: str, vocabulary: Vocabulary | None = None):
        self.text, self.where = text, where
        self.root = parse_xml(_as_read(text), where)
        self.names = names(self.root)  # before anything moves
        self.blocks = Blocks(_Lxml(), vocabulary, self.root) if vocabulary else None

    @property
    def segments(self) -> list:
        return self.blocks.segments if self.blocks else []

    def put_back(self, translated: list[list]) -> None:
        """Each segment's translated tree in its place, made of the nodes that were read."""
        runs: dict[int, list[tuple[Run, list]]] = {}
        for place, nodes in zip(self.blocks.places, translated):
            if isinstance(place, Attribute):
                place.node.set(place.name, "".join(n if isinstance(n, str) else "" for n in nodes))
            else:
                runs.setdefault(id(place.container), []).append((place, nodes))
        for found in runs.values():
            items = list(found[0][0].items)
            for run, nodes in sorted(found, key=lambda rn: -rn[0].start):  # from the end: offsets stay true
                items[run.start : run.end] = nodes
            _fill(found[0][0].container, items)

    def written(self) -> str:
        """The document as text: its prolog as the source wrote it, then the tree; checked."""
        prolog = _PROLOG.match(self.text).group()
        out = prolog + etree.tostring(self.root, encoding="unicode", with_tail=False)
        for after in self.root.itersiblings():
            out += "\n" + etree.tostring(after, encoding="unicode", with_tail=False)
        out = as_in_source(out + self.text[len(self.text.rstrip()) :], self.text)
        self.check(out)
        return out

    def check(self, out: str) -> None:
        """A one-line error where the written text's names or namespaces are not the source's."""
        try:
            after = names(etree.fromstring(_as_read(out), XML))
        except etree.XMLSyntaxError as e:
            message = f"writing {self.where} would give XML that is not well-formed ({e}); nothing was written"
            raise UserError(message) from None
        if after != self.names:
            changed = set((self.names[0] - after[0]) + (after[0] - self.names[0]))
            changed |= {f"xmlns{':' + prefix if prefix else ''}={uri}" for prefix, uri in self.names[1] ^ after[1]}
            what = ", ".join(sorted(changed))[:200]
            raise UserError(f"writing {self.where} would change its markup ({what}); nothing was written")


def _fill(parent, items: list) -> None:
    """`parent`'s content made `items` (text, lxml nodes, placed Elements), moving the nodes
    themselves: a node keeps its namespace, as a copy would not be sure to."""
    for child in list(parent):
        parent.remove(child)
    parent.text, last = None, None
    for item in items:
        if isinstance(item, str):
            if last is None:
                parent.text = (parent.text or "") + item
            else:
                last.tail = (last.tail or "") + item
            continue
        node = item.tag if isinstance(item, Element) else item
        if isinstance(item, Element) and not item.void:
            _fill(node, item.children)
        node.tail = None
        parent.append(node)
        last = node


def translate_documents(documents: list[Document], translate_segments) -> None:
    """Every document's segments translated in one call, so their sentences are batched together,
    and put back."""
    segments = [seg for doc in documents for seg in doc.segments]
    translated = translate_segments(segments) if segments else []
    at = 0
    for doc in documents:
        doc.put_back(translated[at : at + len(doc.segments)])
        at += len(doc.segments)

"""XHTML pages, an EPUB's chapters among them: the HTML vocabulary's walk over a tree that lxml
reads (mt/formats/xmltree.py), so that every element keeps its namespace (an EPUB's `epub:type`,
SVG and MathML inside a page). The page then declares the target language, in `lang` and `xml:lang`.
Empty XHTML elements that HTML does not know as void keep a closing tag, which a browser reading
the page as HTML needs (`<script src="x"></script>`).
"""

from __future__ import annotations

from mt.formats.vocabulary import HTML
from mt.formats.xmltree import Document, translate_documents

NAMESPACE = "http://www.w3.org/1999/xhtml"
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"


def translate_pages(texts: list[str], wheres: list[str], translate_segments, target_lang: str | None) -> list[str]:
    """XHTML pages translated in one call of `translate_segments`, so their sentences are batched
    together; `wheres` names each in an error."""
    pages = [Document(text, where, HTML) for text, where in zip(texts, wheres)]
    translate_documents(pages, translate_segments)
    for page in pages:
        _declare(page.root, target_lang)
    return [page.written() for page in pages]


def _declare(root, target_lang: str | None) -> None:
    """The page's language declared as the target, where it was declared; empty elements closed."""
    for name in ("lang", XML_LANG):
        if target_lang and root.get(name):
            root.set(name, target_lang)
    for el in root.iter(f"{{{NAMESPACE}}}*"):
        if len(el) == 0 and el.text is None and el.tag.split("}")[1].lower() not in HTML.voids:
            el.text = ""


def translate(text: str, job) -> str:
    """An XHTML page translated (the xhtml format's adapter)."""
    return translate_pages([text], [job.name], job.segments, job.target_lang)[0]

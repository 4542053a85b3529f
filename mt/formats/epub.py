"""EPUB books: every XHTML document the package lists (chapters, the navigation) translated through
the XHTML path, all in one batch, and the package's `dc:language` (and its `xml:lang`, where it has
one) made the target language; every other member of the archive (styles, images, fonts) copied
byte for byte, in its order and with its compression. The zip is read directly rather than through
an EPUB library, which would write the package anew."""

from __future__ import annotations

import posixpath
from urllib.parse import unquote

from lxml import etree

from mt.errors import UserError
from mt.formats import read_text
from mt.formats.archives import open_zip, parse_xml, read_member, rewritten
from mt.formats.xhtml import XML_LANG, translate_pages
from mt.formats.xmltree import Document

XHTML = "application/xhtml+xml"
_DC_LANGUAGE = "{http://purl.org/dc/elements/1.1/}language"


def _package_name(archive) -> str:
    container = parse_xml(read_member(archive, "META-INF/container.xml", ".epub"), "META-INF/container.xml", ".epub")
    rootfile = next((el.get("full-path") for el in container.iter() if etree.QName(el).localname == "rootfile"), None)
    if not rootfile:
        raise UserError("the .epub file's META-INF/container.xml names no package document (rootfile)")
    return rootfile


def chapters(archive, package, rootfile: str) -> list[str]:
    """The archive members the package document lists as XHTML, in manifest order."""
    base = posixpath.dirname(rootfile)
    names = set(archive.namelist())
    found = []
    for item in package.iter():
        if etree.QName(item).localname == "item" and item.get("media-type") == XHTML and item.get("href"):
            name = posixpath.normpath(posixpath.join(base, unquote(item.get("href"))))
            if name in names and name not in found:
                found.append(name)
    return found


def _package_in(target_lang: str | None, package: Document) -> bytes | None:
    """The package document declaring `target_lang` as the book's first language, and as the
    package's own `xml:lang` where it has one; None where it needs no change."""
    if not target_lang:
        return None
    changed = False
    first = next(package.root.iter(_DC_LANGUAGE), None)
    if first is not None and (first.text or "").strip() != target_lang:
        first.text, changed = target_lang, True
    if package.root.get(XML_LANG) not in (None, target_lang):
        package.root.set(XML_LANG, target_lang)
        changed = True
    return package.written().encode("utf-8") if changed else None


def translate(data: bytes, job) -> bytes:
    """An .epub file with its chapters translated (the epub format's adapter): see the module notes."""
    archive = open_zip(data, ".epub")
    rootfile = _package_name(archive)
    package = Document(read_text(read_member(archive, rootfile, ".epub"), rootfile), f"the .epub file's {rootfile}")
    names = chapters(archive, package.root, rootfile)
    texts = [read_text(read_member(archive, name, ".epub"), name) for name in names]
    wheres = [f"the .epub file's {name}" for name in names]
    changed = {
        name: text.encode("utf-8")
        for name, text in zip(names, translate_pages(texts, wheres, job.segments, job.target_lang))
    }
    if (written := _package_in(job.target_lang, package)) is not None:
        changed[rootfile] = written
    return rewritten(archive, changed, ".epub")

"""EPUB books: every XHTML document the package lists (chapters, the navigation) translated through
the HTML path, all in one batch; every other member of the archive (the package document with the
book's metadata, styles, images, fonts) copied byte for byte, in its order and with its compression.
The zip is read directly rather than through an EPUB library, which would write the package anew."""

from __future__ import annotations

import posixpath
from urllib.parse import unquote

from lxml import etree

from mt.errors import UserError
from mt.formats.archives import open_zip, parse_xml, read_member, rewritten
from mt.formats.html import read_text, translate_html_many

XHTML = "application/xhtml+xml"


def chapters(archive) -> list[str]:
    """The archive members the package document lists as XHTML, in manifest order."""
    container = parse_xml(read_member(archive, "META-INF/container.xml", ".epub"), "META-INF/container.xml", ".epub")
    rootfile = next((el.get("full-path") for el in container.iter() if etree.QName(el).localname == "rootfile"), None)
    if not rootfile:
        raise UserError("the .epub file's META-INF/container.xml names no package document (rootfile)")
    package = parse_xml(read_member(archive, rootfile, ".epub"), rootfile, ".epub")
    base = posixpath.dirname(rootfile)
    names = set(archive.namelist())
    found = []
    for item in package.iter():
        if etree.QName(item).localname == "item" and item.get("media-type") == XHTML and item.get("href"):
            name = posixpath.normpath(posixpath.join(base, unquote(item.get("href"))))
            if name in names and name not in found:
                found.append(name)
    return found


def translate_epub(data: bytes, translate_segments, target_lang: str | None = None) -> bytes:
    """An .epub file with its chapters translated: see the module notes."""
    archive = open_zip(data, ".epub")
    names = chapters(archive)
    texts = [read_text(read_member(archive, name, ".epub"), name) for name in names]
    translated = translate_html_many(texts, translate_segments, xhtml=True, target_lang=target_lang)
    return rewritten(archive, {name: text.encode("utf-8") for name, text in zip(names, translated)}, ".epub")

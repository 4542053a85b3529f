"""EPUB books (mt/formats/epub.py): each chapter translated through the HTML path; every other member
of the archive (the package document and its metadata, styles, images) byte for byte, in order."""

import io
import zipfile

import pytest
from helpers import Reverse, Upper, xml_names

pytest.importorskip("lxml", reason="the formats extra is not installed (pip install 'mt[formats]')")
pytest.importorskip("bs4", reason="the formats extra is not installed (pip install 'mt[formats]')")

from lxml import etree  # noqa: E402

from mt.inference.formatted import translate_formatted  # noqa: E402

CONTAINER = """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
  <rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles>
</container>"""
PACKAGE = """<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Le livre</dc:title><dc:language>fr</dc:language>
  <dc:identifier id="id">urn:uuid:1</dc:identifier></metadata>
  <manifest>
    <item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>
    <item id="c1" href="text/chapitre%201.xhtml" media-type="application/xhtml+xml"/>
    <item id="css" href="style.css" media-type="text/css"/>
  </manifest>
  <spine><itemref idref="c1"/></spine>
</package>"""
CHAPTER = """<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" lang="fr"><head><title>Chapitre un</title>
<link rel="stylesheet" href="../style.css"/></head>
<body><h1>Chapitre un</h1><p>Le <em>chat</em> noir dort.<br/>Il r&#234;ve.</p></body></html>"""
NAV = """<?xml version="1.0" encoding="utf-8"?>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops"><head><title>Table</title></head>
<body><nav epub:type="toc"><ol><li><a href="text/chapitre%201.xhtml">Chapitre un</a></li></ol></nav></body></html>"""


def book(package: str = PACKAGE) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")  # first and stored, as EPUB asks
        z.writestr("META-INF/container.xml", CONTAINER, zipfile.ZIP_DEFLATED)
        z.writestr("OEBPS/content.opf", package, zipfile.ZIP_DEFLATED)
        z.writestr("OEBPS/nav.xhtml", NAV, zipfile.ZIP_DEFLATED)
        z.writestr("OEBPS/text/chapitre 1.xhtml", CHAPTER, zipfile.ZIP_DEFLATED)
        z.writestr("OEBPS/style.css", "p { margin: 0 }", zipfile.ZIP_DEFLATED)
    return out.getvalue()


def test_chapters_are_translated_and_every_other_member_is_kept_byte_for_byte_in_order():
    source = book()
    out = zipfile.ZipFile(io.BytesIO(translate_formatted(Upper(), source, "epub")))
    before = zipfile.ZipFile(io.BytesIO(source))
    assert [(i.filename, i.compress_type) for i in out.infolist()] == [
        (i.filename, i.compress_type) for i in before.infolist()
    ]
    for name in ("mimetype", "META-INF/container.xml", "OEBPS/style.css"):
        assert out.read(name) == before.read(name), name
    chapter = out.read("OEBPS/text/chapitre 1.xhtml").decode()
    assert "<h1>CHAPITRE UN</h1>" in chapter and "<p>LE <em>CHAT</em> NOIR DORT.<br/>IL R" in chapter
    assert '<link rel="stylesheet" href="../style.css"/>' in chapter and 'lang="en"' in chapter
    assert '<a href="text/chapitre%201.xhtml">CHAPITRE UN</a>' in out.read("OEBPS/nav.xhtml").decode()


def test_the_package_declares_the_target_language_and_nothing_else_changes_in_it():
    out = zipfile.ZipFile(io.BytesIO(translate_formatted(Upper(), book(), "epub")))
    package = out.read("OEBPS/content.opf").decode()
    assert package == PACKAGE.replace("<dc:language>fr</dc:language>", "<dc:language>en</dc:language>")


def test_the_packages_own_language_is_the_target_language_too():
    source = PACKAGE.replace('version="3.0"', 'version="3.0" xml:lang="fr"')
    for before in (source, source.replace("<dc:language>fr<", "<dc:language>en<")):
        out = zipfile.ZipFile(io.BytesIO(translate_formatted(Upper(), book(before), "epub")))
        assert out.read("OEBPS/content.opf").decode() == source.replace('"fr"', '"en"').replace(">fr<", ">en<")


@pytest.mark.parametrize("translator", [Upper, Reverse])
def test_chapters_and_the_navigation_keep_every_namespace_they_had(translator):
    out = zipfile.ZipFile(io.BytesIO(translate_formatted(translator(), book(), "epub")))
    for name, source in (("OEBPS/text/chapitre 1.xhtml", CHAPTER), ("OEBPS/nav.xhtml", NAV)):
        assert xml_names(out.read(name)) == xml_names(source.encode()), name
    nav = etree.fromstring(out.read("OEBPS/nav.xhtml"))
    assert nav.nsmap == {None: "http://www.w3.org/1999/xhtml", "epub": "http://www.idpf.org/2007/ops"}
    toc = nav.find(".//{http://www.w3.org/1999/xhtml}nav")
    assert toc.get("{http://www.idpf.org/2007/ops}type") == "toc"
    chapter = etree.fromstring(out.read("OEBPS/text/chapitre 1.xhtml"))
    assert chapter.get("lang") == "en" and chapter.nsmap == {None: "http://www.w3.org/1999/xhtml"}

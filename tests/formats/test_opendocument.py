"""OpenDocument text and presentations (mt/formats/opendocument.py), read back with lxml: the text of
paragraphs, headings, lists, cells, slides, notes and headers translated with spans and spaces
where they were; fields, comments and number styles untouched; every other member as it was."""

import io
import zipfile

import pytest
from helpers import Reverse, Upper, xml_names

pytest.importorskip("bs4", reason="the formats extra is not installed (pip install 'mt[formats]')")

from lxml import etree  # noqa: E402

from mt.inference.formatted import translate_formatted  # noqa: E402

NS = {
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "style": "urn:oasis:names:tc:opendocument:xmlns:style:1.0",
    "number": "urn:oasis:names:tc:opendocument:xmlns:datastyle:1.0",
    "draw": "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0",
    "presentation": "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0",
    "xlink": "http://www.w3.org/1999/xlink",
    "dc": "http://purl.org/dc/elements/1.1/",
}
DECLARED = " ".join(f'xmlns:{k}="{v}"' for k, v in NS.items())
TEXT_BODY = """<office:text>
<text:h text:outline-level="1">Le titre du rapport</text:h>
<text:p>Le <text:span text:style-name="T1">chat</text:span> noir<text:s text:c="2"/>dort sur le <text:a xlink:type="simple" xlink:href="https://example.com/tapis">tapis</text:a>.</text:p>
<text:p>Page <text:page-number text:select-page="current">trois</text:page-number> du rapport.</text:p>
<text:list><text:list-item><text:p>Une femme lit.</text:p></text:list-item></text:list>
<table:table table:name="T"><table:table-row><table:table-cell><text:p>une cellule</text:p></table:table-cell></table:table-row></table:table>
<text:p>Un mot<office:annotation><dc:creator>relecteur</dc:creator><text:p>une remarque</text:p></office:annotation> ici.</text:p>
</office:text>"""  # noqa: E501
SLIDES = """<office:presentation><draw:page draw:name="page1">
<draw:frame presentation:class="title"><draw:text-box><text:p>Le <text:span text:style-name="T1">chien</text:span> court</text:p></draw:text-box></draw:frame>
<presentation:notes><draw:frame><draw:text-box><text:p>Dire bonjour.</text:p></draw:text-box></draw:frame></presentation:notes>
</draw:page></office:presentation>"""  # noqa: E501
STYLES = f"""<?xml version="1.0" encoding="UTF-8"?>
<office:document-styles {DECLARED}><office:styles><number:date-style style:name="N1"><number:day/>
<number:text> du mois </number:text><number:month/></number:date-style></office:styles>
<office:master-styles><style:master-page style:name="Standard"><style:header><text:p>En-tête du document</text:p>
</style:header></style:master-page></office:master-styles></office:document-styles>"""


def package(kind: str, body: str) -> bytes:
    media = f"application/vnd.oasis.opendocument.{'text' if kind == 'odt' else 'presentation'}"
    content = f'<?xml version="1.0" encoding="UTF-8"?>\n<office:document-content {DECLARED}><office:body>{body}</office:body></office:document-content>'  # noqa: E501
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(zipfile.ZipInfo("mimetype"), media)  # first and stored, as OpenDocument requires
        z.writestr("META-INF/manifest.xml", b"<manifest/>", zipfile.ZIP_DEFLATED)
        z.writestr("content.xml", content, zipfile.ZIP_DEFLATED)
        z.writestr("styles.xml", STYLES, zipfile.ZIP_DEFLATED)
        z.writestr("Pictures/a.png", b"\x89PNG not really", zipfile.ZIP_DEFLATED)
    return out.getvalue()


def texts(root, path: str) -> list[str]:
    return ["".join(el.itertext()) for el in root.xpath(path, namespaces=NS)]


def test_a_text_document_comes_back_translated_with_its_spans_spaces_fields_and_comments():
    source, upper = package("odt", TEXT_BODY), Upper()
    out = zipfile.ZipFile(io.BytesIO(translate_formatted(upper, source, "odt")))
    before = zipfile.ZipFile(io.BytesIO(source))
    assert [i.filename for i in out.infolist()] == [i.filename for i in before.infolist()]
    assert out.infolist()[0].compress_type == zipfile.ZIP_STORED and out.read("mimetype") == before.read("mimetype")
    assert out.read("Pictures/a.png") == before.read("Pictures/a.png")
    body = etree.fromstring(out.read("content.xml"))
    assert texts(body, "//text:h") == ["LE TITRE DU RAPPORT"]
    cat = body.xpath("//text:p[text:span]", namespaces=NS)[0]
    assert texts(cat, "text:span") == ["CHAT"] and texts(cat, "text:a") == ["TAPIS"]
    assert cat.find("text:a", NS).get(f"{{{NS['xlink']}}}href") == "https://example.com/tapis"
    assert cat.find("text:s", NS).get(f"{{{NS['text']}}}c") == "2"  # the extra spaces, where they were
    assert texts(body, "//text:page-number") == ["trois"]  # a field keeps its value
    assert "".join(texts(body, "//text:p[text:page-number]")) == "PAGE trois DU RAPPORT."
    assert texts(body, "//text:list-item/text:p") == ["UNE FEMME LIT."]
    assert texts(body, "//table:table-cell/text:p") == ["UNE CELLULE"]
    assert texts(body, "//office:annotation/text:p") == ["une remarque"]  # a comment is not the text
    assert "Un mot ici." in upper.seen  # and the sentence it sits in is one sentence
    styles = etree.fromstring(out.read("styles.xml"))
    assert texts(styles, "//style:header/text:p") == ["EN-TÊTE DU DOCUMENT"]
    assert texts(styles, "//number:text") == [" du mois "]


def test_a_presentation_has_its_slides_and_notes_translated():
    out = zipfile.ZipFile(io.BytesIO(translate_formatted(Upper(), package("odp", SLIDES), "odp")))
    body = etree.fromstring(out.read("content.xml"))
    assert texts(body, "//draw:page/draw:frame//text:p") == ["LE CHIEN COURT"]
    assert texts(body, "//draw:page/draw:frame//text:span") == ["CHIEN"]
    assert texts(body, "//presentation:notes//text:p") == ["DIRE BONJOUR."]


def test_a_damaged_part_is_one_line_and_nothing_is_written():
    from mt.errors import UserError

    whole = package("odt", TEXT_BODY)
    source = zipfile.ZipFile(io.BytesIO(whole))
    cut = io.BytesIO()
    with zipfile.ZipFile(cut, "w") as z:
        for info in source.infolist():
            data = source.read(info.filename)
            z.writestr(info, data[: len(data) * 7 // 10] if info.filename == "content.xml" else data)
    with pytest.raises(UserError, match="content.xml is not well-formed XML"):
        translate_formatted(Upper(), cut.getvalue(), "odt")


@pytest.mark.parametrize("translator", [Upper, Reverse])
def test_every_part_keeps_every_namespace_it_had(translator):
    source = package("odt", TEXT_BODY)
    out = zipfile.ZipFile(io.BytesIO(translate_formatted(translator(), source, "odt")))
    before = zipfile.ZipFile(io.BytesIO(source))
    for name in ("content.xml", "styles.xml"):
        assert xml_names(out.read(name)) == xml_names(before.read(name)), name
        assert etree.fromstring(out.read(name)).nsmap == etree.fromstring(before.read(name)).nsmap


def test_spans_follow_their_words_where_the_translation_reorders_them():
    out = zipfile.ZipFile(io.BytesIO(translate_formatted(Reverse(), package("odt", TEXT_BODY), "odt")))
    cat = etree.fromstring(out.read("content.xml")).xpath("//text:p[text:span]", namespaces=NS)[0]
    assert texts(cat, "text:span") == ["CHAT"] and texts(cat, "text:a") == ["TAPIS"]
    assert "".join(cat.itertext()).startswith("TAPIS LE SUR DORT")

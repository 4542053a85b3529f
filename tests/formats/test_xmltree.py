"""XML documents read and written with lxml (mt/formats/xmltree.py): what stands before the root as
the source wrote it, entities spelt as the source spelt them, and a written document whose names or
namespaces differ from the source's refused in one line, with nothing written."""

import pytest
from helpers import Upper

pytest.importorskip("lxml", reason="the formats extra is not installed (pip install 'mt[formats]')")

from mt.errors import UserError  # noqa: E402
from mt.formats import xmltree  # noqa: E402
from mt.formats.xmltree import Document  # noqa: E402
from mt.inference.formatted import translate_formatted  # noqa: E402

PAGE = """<?xml version='1.0' encoding='utf-8'?>
<!-- a comment before the root -->
<!DOCTYPE html [<!ENTITY marque "Chatnoir">]>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops"><body>
<p epub:type="x">Le&nbsp;chat de &marque; &eacute;crit &copy; 2024 &amp; &lt;hiver&gt;.</p></body></html>
"""


def test_the_prolog_and_the_entities_are_written_as_the_source_wrote_them():
    out = translate_formatted(Upper(), PAGE, "xhtml")
    assert out.startswith(PAGE[: PAGE.index("<html")]) and out.endswith("</html>\n")
    assert "LE&nbsp;CHAT DE &marque; ÉCRIT &copy; 2024 &amp; &lt;HIVER&gt;." in out  # &marque; kept, not translated


def test_a_written_document_whose_names_or_namespaces_differ_is_refused_in_one_line():
    document = Document(PAGE, "page.xhtml")
    document.check(PAGE)  # the same names: nothing to say
    for damaged in (PAGE.replace("epub:type", "type"), PAGE.replace("<body>", "<body><b/>")):
        with pytest.raises(UserError, match="writing page.xhtml would change its markup") as caught:
            document.check(damaged)
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            lambda text: text.replace("http://www.idpf.org/2007/ops", "http://example.com/ops"),
            "would change its markup",
        ),
        (lambda text: text.replace(' xmlns:epub="', ' xmlns:e="'), "would give XML that is not well-formed"),
    ],
)
def test_an_epub_that_would_come_back_damaged_is_not_written(monkeypatch, damage, message):
    from test_epub import book

    written = xmltree.as_in_source
    monkeypatch.setattr(xmltree, "as_in_source", lambda text, source: damage(written(text, source)))
    with pytest.raises(UserError, match=f"writing the .epub file's OEBPS/nav.xhtml {message}") as caught:
        translate_formatted(Upper(), book(), "epub")
    assert "\n" not in str(caught.value) and "nothing was written" in str(caught.value)


def test_which_elements_are_blocks_is_known_of_each_element_however_lxml_reuses_its_objects():
    # lxml frees an element's Python object once unused and may give its address to another: spans
    # read after a block's children were looked at must not be taken for that block.
    from mt.formats.vocabulary import HTML

    for n in range(1, 8):
        block = "<a>" + "<span>s</span>" * n + "<div>d</div></a>"
        page = f'<html xmlns="http://www.w3.org/1999/xhtml"><body>{block * 3}</body></html>'
        assert [s.text for s in Document(page, "page.xhtml", HTML).segments] == ["s" * n, "d"] * 3, n


def test_names_counts_each_qualified_name_and_holds_every_namespace_in_scope():
    from collections import Counter

    from lxml import etree

    counted, scope = xmltree.names(etree.fromstring(b'<r xmlns="u" xmlns:e="v"><p e:t="1"/><p t="2"/><!-- c --></r>'))
    assert counted == Counter({"{u}r": 1, "{u}p": 2, "@{v}t": 1, "@t": 1}) and scope == {(None, "u"), ("e", "v")}


def test_a_document_that_is_not_well_formed_is_one_line_naming_it():
    with pytest.raises(UserError, match=r"^page.xhtml is not well-formed XML \(") as caught:
        Document("<html><p>ouvert</html>", "page.xhtml")
    assert "\n" not in str(caught.value)

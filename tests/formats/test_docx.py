"""Word documents (mt/formats/docx.py), read back with python-docx: the same paragraphs, tables,
headers and footers, the formatting of each run on the right words, and the styles untouched."""

import io

import pytest
from helpers import Reverse, Upper

docx = pytest.importorskip("docx", reason="the formats extra is not installed (pip install 'mt[formats]')")

from mt.inference.formatted import translate_formatted  # noqa: E402


def document() -> bytes:
    d = docx.Document()
    d.add_heading("Le titre du rapport", level=1)
    p = d.add_paragraph("Le ", style="List Bullet")
    p.add_run("chat").bold = True
    p.add_run(" noir dort sur le ")
    red = p.add_run("tapis rouge")
    red.italic = True
    p.add_run(".")
    tabbed = d.add_paragraph("Nom :")
    tabbed.add_run().add_tab()
    tabbed.add_run("valeur")
    table = d.add_table(rows=2, cols=2)
    for row, texts in zip(table.rows, [("une cellule", "deux cellules"), ("trois", "quatre")]):
        for cell, text in zip(row.cells, texts):
            cell.text = text
    section = d.sections[0]
    section.header.paragraphs[0].text = "En-tête du document"
    section.footer.paragraphs[0].text = "Pied de page"
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


def test_paragraphs_runs_tables_headers_and_footers_come_back_translated_with_their_formatting():
    source = document()
    out = docx.Document(io.BytesIO(translate_formatted(Upper(), source, "docx")))
    before = docx.Document(io.BytesIO(source))
    assert len(out.paragraphs) == len(before.paragraphs) and len(out.tables) == 1
    assert [p.style.name for p in out.paragraphs] == [p.style.name for p in before.paragraphs]
    assert out.paragraphs[0].text == "LE TITRE DU RAPPORT"
    runs = [(r.text, r.bold, r.italic) for r in out.paragraphs[1].runs]
    assert ("CHAT", True, None) in runs and ("TAPIS ROUGE", None, True) in runs
    assert "".join(r.text for r in out.paragraphs[1].runs) == "LE CHAT NOIR DORT SUR LE TAPIS ROUGE."
    assert out.paragraphs[2].text == "NOM :\tVALEUR"  # the tab between the two words, where it was
    assert [[c.text for c in row.cells] for row in out.tables[0].rows] == [
        ["UNE CELLULE", "DEUX CELLULES"],
        ["TROIS", "QUATRE"],
    ]
    assert out.sections[0].header.paragraphs[0].text == "EN-TÊTE DU DOCUMENT"
    assert out.sections[0].footer.paragraphs[0].text == "PIED DE PAGE"


def test_a_paragraph_with_field_codes_is_left_as_it_is():
    from docx.oxml import parse_xml
    from docx.oxml.ns import nsdecls

    d = docx.Document()
    p = d.add_paragraph("Page ")
    for xml in ('<w:fldChar w:fldCharType="begin"/>', '<w:instrText xml:space="preserve"> PAGE </w:instrText>',
                '<w:fldChar w:fldCharType="end"/>'):  # fmt: skip
        p._p.append(parse_xml(f"<w:r {nsdecls('w')}>{xml}</w:r>"))
    d.add_paragraph("une autre")
    buffer = io.BytesIO()
    d.save(buffer)
    out = docx.Document(io.BytesIO(translate_formatted(Upper(), buffer.getvalue(), "docx")))
    assert out.paragraphs[0]._p.xml == d.paragraphs[0]._p.xml and out.paragraphs[1].text == "UNE AUTRE"


def test_formatting_follows_its_words_where_the_translation_reorders_them():
    out = docx.Document(io.BytesIO(translate_formatted(Reverse(), document(), "docx")))
    runs = out.paragraphs[1].runs
    assert "".join(r.text for r in runs) == "ROUGE TAPIS LE SUR DORT NOIR CHAT LE."
    assert [r.text for r in runs if r.bold] == ["CHAT"] and [r.text for r in runs if r.italic] == ["ROUGE TAPIS"]
    assert out.paragraphs[2].text == "VALEUR :\tNOM"  # the tab after the word it followed

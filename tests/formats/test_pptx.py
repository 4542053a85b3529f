"""PowerPoint presentations (mt/formats/pptx.py over mt/formats/office.py), read back with
python-pptx: the same slides and shapes, the formatting of each run on the right words, line breaks,
tables and speaker notes translated, fields and each paragraph's closing properties kept."""

import io

import pytest
from helpers import Upper

pptx = pytest.importorskip("pptx", reason="the formats extra is not installed (pip install 'mt[formats]')")

from pptx.util import Inches  # noqa: E402

from mt.formats.office import DRAWING  # noqa: E402
from mt.inference.formatted import translate_formatted  # noqa: E402


def presentation() -> bytes:
    deck = pptx.Presentation()
    title = deck.slides.add_slide(deck.slide_layouts[1])
    title.shapes.title.text = "Le rapport annuel"
    body = title.placeholders[1].text_frame
    body.text = "Le "
    para = body.paragraphs[0]
    bold = para.add_run()
    bold.text, bold.font.bold = "chat", True
    tail = para.add_run()
    tail.text = " noir dort."
    second = body.add_paragraph()
    second.text = "Une ligne\vet une autre"  # \v: a line break inside the paragraph (a:br)
    title.notes_slide.notes_text_frame.text = "Dire bonjour au public."
    other = deck.slides.add_slide(deck.slide_layouts[6])
    table = other.shapes.add_table(2, 2, Inches(1), Inches(1), Inches(4), Inches(1)).table
    for (r, c), text in zip([(0, 0), (0, 1), (1, 0), (1, 1)], ["une cellule", "deux", "trois", "quatre"]):
        table.cell(r, c).text = text
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def test_slides_runs_breaks_tables_and_notes_come_back_translated_with_their_formatting():
    source = presentation()
    out = pptx.Presentation(io.BytesIO(translate_formatted(Upper(), source, "pptx")))
    before = pptx.Presentation(io.BytesIO(source))
    assert len(out.slides) == 2 and [len(s.shapes) for s in out.slides] == [len(s.shapes) for s in before.slides]
    first = out.slides[0]
    assert first.shapes.title.text == "LE RAPPORT ANNUEL"
    para = first.placeholders[1].text_frame.paragraphs[0]
    assert "".join(r.text for r in para.runs) == "LE CHAT NOIR DORT."
    assert [r.text for r in para.runs if r.font.bold] == ["CHAT"]
    assert first.placeholders[1].text_frame.paragraphs[1].text == "UNE LIGNE\vET UNE AUTRE"  # the break kept
    assert first.notes_slide.notes_text_frame.text == "DIRE BONJOUR AU PUBLIC."
    cells = out.slides[1].shapes[0].table
    rows = [[cells.cell(r, c).text for c in range(2)] for r in range(2)]
    assert rows == [["UNE CELLULE", "DEUX"], ["TROIS", "QUATRE"]]


def test_closing_properties_stay_last_fields_stay_whole_and_spelling_marks_are_no_formatting():
    from lxml import etree

    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[6])
    frame = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1)).text_frame
    a = f'xmlns:a="{DRAWING.namespace}"'
    p = etree.fromstring(
        f'<a:p {a}><a:r><a:rPr lang="fr-FR"/><a:t>Diapositive </a:t></a:r>'
        '<a:fld id="{B6F15528-21DE-4FAA-801E-634DDDAF4B2B}" type="slidenum"><a:t>1</a:t></a:fld>'
        '<a:r><a:rPr lang="fr-FR" err="1"/><a:t> sur dix</a:t></a:r><a:endParaRPr lang="fr-FR"/></a:p>'
    )
    frame._txBody.replace(frame._txBody.find(DRAWING.tag("p")), p)
    buffer = io.BytesIO()
    deck.save(buffer)
    out = pptx.Presentation(io.BytesIO(translate_formatted(Upper(), buffer.getvalue(), "pptx")))
    p = out.slides[0].shapes[0].text_frame.paragraphs[0]._p
    names = [etree.QName(child).localname for child in p]
    assert names[-1] == "endParaRPr" and names.count("fld") == 1
    assert p.find(DRAWING.tag("fld")).get("type") == "slidenum"
    assert "".join(t.text for t in p.iter(DRAWING.tag("t"))) == "DIAPOSITIVE 1 SUR DIX"
    assert names.count("r") == 2  # the spelling mark (err="1") made no span of its own: one run each side


def test_a_slide_its_presentation_points_at_but_does_not_hold_is_one_line():
    import re
    import zipfile

    from mt.errors import UserError

    whole, broken = zipfile.ZipFile(io.BytesIO(presentation())), io.BytesIO()
    with zipfile.ZipFile(broken, "w") as z:
        for info in whole.infolist():
            data = whole.read(info.filename)
            if info.filename == "ppt/presentation.xml":
                data = re.sub(rb'(<p:sldId [^>]*r:id=")rId\d+"', rb'\1rId99"', data, count=1)
            z.writestr(info, data)
    with pytest.raises(UserError, match="not a .pptx file, or a damaged one"):
        translate_formatted(Upper(), broken.getvalue(), "pptx")

"""Excel workbooks (mt/formats/xlsx.py over mt/formats/office.py), read back with openpyxl: every
cell's text translated, rich text's bold on the right words, inline strings too; numbers, formulas
and sheet names as they were."""

import io
import re
import zipfile

import pytest
from helpers import Upper

openpyxl = pytest.importorskip("openpyxl", reason="openpyxl is in the dev extra (pip install 'mt[dev]')")

from openpyxl.cell.rich_text import CellRichText, TextBlock  # noqa: E402
from openpyxl.cell.text import InlineFont  # noqa: E402

from mt.errors import UserError  # noqa: E402
from mt.inference.formatted import translate_formatted  # noqa: E402

MAIN = b"http://schemas.openxmlformats.org/spreadsheetml/2006/main"
SHARED_TYPE = (
    b'<Override PartName="/xl/sharedStrings.xml" '
    b'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/>'
)


def workbook(shared: bool = False) -> bytes:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Feuille"
    ws["A1"], ws["A2"], ws["A3"] = "Le chat noir", 42, "=A2*2"
    ws["B1"] = CellRichText(["Le ", TextBlock(InlineFont(b=True), "chien"), " dort"])
    ws["B2"] = "Un mot"
    return saved(wb, shared)


def saved(wb, shared: bool) -> bytes:
    """A workbook as openpyxl writes it (strings inline in the sheet), or with its strings moved to
    a shared strings part, as Excel and LibreOffice write them."""
    out = io.BytesIO()
    wb.save(out)
    if not shared:
        return out.getvalue()
    source, changed, strings = zipfile.ZipFile(out), io.BytesIO(), []

    def to_shared(m):
        strings.append(m.group(2))
        return b'<c r="%s" t="s"><v>%d</v></c>' % (m.group(1), len(strings) - 1)

    with zipfile.ZipFile(changed, "w") as z:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename == "xl/worksheets/sheet1.xml":
                data = re.sub(rb'<c r="(\w+)" t="inlineStr"><is>(.*?)</is></c>', to_shared, data)
            elif info.filename == "[Content_Types].xml":
                data = data.replace(b"</Types>", SHARED_TYPE + b"</Types>")
            z.writestr(info, data)
        items = b"".join(b"<si>%s</si>" % t for t in strings)
        z.writestr("xl/sharedStrings.xml", b'<sst xmlns="%s">%s</sst>' % (MAIN, items))
    return changed.getvalue()


@pytest.mark.parametrize("shared", [False, True], ids=["inline strings", "shared strings"])
def test_cells_and_rich_text_come_back_translated_with_numbers_formulas_and_sheet_names_kept(shared):
    source = workbook(shared)
    assert (b"sharedStrings" in source) == shared
    out = openpyxl.load_workbook(io.BytesIO(translate_formatted(Upper(), source, "xlsx")), rich_text=True)
    ws = out["Feuille"]
    assert (ws["A1"].value, ws["A2"].value, ws["A3"].value, ws["B2"].value) == ("LE CHAT NOIR", 42, "=A2*2", "UN MOT")
    rich = ws["B1"].value
    assert str(rich) == "LE CHIEN DORT"
    assert [block.text for block in rich if isinstance(block, TextBlock) and block.font.b] == ["CHIEN"]


@pytest.mark.parametrize("shared", [False, True], ids=["inline strings", "shared strings"])
def test_a_tables_header_cells_stay_as_its_columns_are_named_and_a_line_break_in_a_cell_stays(shared):
    from openpyxl.worksheet.table import Table

    wb = openpyxl.Workbook()
    ws = wb.active
    ws["A1"], ws["B1"], ws["A2"], ws["B2"] = "Nom", "Ville", "Le chat", "la ville"
    ws["D5"] = "Nom du client\nAdresse postale"
    ws.add_table(Table(displayName="Clients", ref="A1:B2"))
    out = openpyxl.load_workbook(io.BytesIO(translate_formatted(Upper(), saved(wb, shared), "xlsx")))
    ws = out.active
    assert [c.value for c in ws[1]][:2] == ["Nom", "Ville"]  # as the table names its columns
    assert [c.value for c in ws[2]][:2] == ["LE CHAT", "LA VILLE"]
    assert [col.name for col in ws.tables["Clients"].tableColumns] == ["Nom", "Ville"]
    assert ws["D5"].value == "NOM DU CLIENT\nADRESSE POSTALE"


def test_a_zip_that_is_not_a_workbook_is_one_line():
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as z:
        z.writestr("word/document.xml", "<w/>")
    with pytest.raises(UserError, match="no xl/workbook.xml"):
        translate_formatted(Upper(), data.getvalue(), "xlsx")

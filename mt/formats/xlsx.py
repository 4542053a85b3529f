"""Excel workbooks (.xlsx): the text of every cell translated, with rich text's formatting kept on
the right words; numbers, formulas, sheet names, styles and everything else in the file kept.

A workbook keeps its cells' text once, in its shared strings (xl/sharedStrings.xml), and sometimes
inline in a sheet; both are paragraphs of runs for mt/formats/office.py (SpreadsheetML). The zip is
read directly and every other member copied byte for byte, as a spreadsheet library would write the
whole workbook anew.
"""

from __future__ import annotations

from lxml import etree

from mt.errors import UserError
from mt.formats.archives import open_zip, read_member, rewritten
from mt.formats.office import SPREADSHEET, translate_paragraphs

SHARED = "xl/sharedStrings.xml"
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=True)


def _strings(root) -> list:
    """A part's strings: shared ones (si), and a sheet's inline ones (is)."""
    return [el for el in root.iter(SPREADSHEET.tag("si"), SPREADSHEET.tag("is"))]


def translate_xlsx(data: bytes, translate_segments) -> bytes:
    """An .xlsx file with its text translated: see the module notes."""
    archive = open_zip(data, ".xlsx")
    names = archive.namelist()
    if "xl/workbook.xml" not in names:
        raise UserError("not an .xlsx file, or a damaged one: it has no xl/workbook.xml")
    sheets = [n for n in names if n.startswith("xl/worksheets/") and n.endswith(".xml")]
    parts = {}
    for name in [SHARED] * (SHARED in names) + sheets:
        raw = read_member(archive, name, ".xlsx")
        if name == SHARED or b"inlineStr" in raw:
            try:
                parts[name] = etree.fromstring(raw, _PARSER)
            except etree.XMLSyntaxError as e:
                raise UserError(f"the .xlsx file's {name} is not well-formed XML ({e})") from None
    translate_paragraphs([s for root in parts.values() for s in _strings(root)], translate_segments, SPREADSHEET)
    changed = {
        name: etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)
        for name, root in parts.items()
    }
    return rewritten(archive, changed, ".xlsx")

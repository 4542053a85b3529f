"""Excel workbooks (.xlsx): the text of every cell translated, with rich text's formatting kept on
the right words; numbers, formulas, sheet names, styles and everything else in the file kept.

A workbook keeps its cells' text once, in its shared strings (xl/sharedStrings.xml), and sometimes
inline in a sheet; both are paragraphs of runs for mt/formats/office.py (SpreadsheetML). A table's
header cells stay as they are: the table names its columns by them, and formulas name the columns.
The zip is read directly and every other member copied byte for byte, as a spreadsheet library
would write the whole workbook anew.
"""

from __future__ import annotations

import posixpath
import re

from lxml import etree

from mt.errors import UserError
from mt.formats.archives import open_zip, parse_xml, read_member, rewritten
from mt.formats.office import SPREADSHEET, translate_paragraphs

SHARED = "xl/sharedStrings.xml"
_RELS = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"
_CELL = re.compile(r"([A-Z]+)(\d+)")


def _xml(archive, name: str):
    return parse_xml(read_member(archive, name, ".xlsx"), name, ".xlsx")


def _column(letters: str) -> int:
    return sum((ord(c) - 64) * 26**i for i, c in enumerate(reversed(letters)))


def _letters(column: int) -> str:
    out = ""
    while column:
        column, rest = divmod(column - 1, 26)
        out = chr(65 + rest) + out
    return out


def _header_cells(archive, sheet: str) -> set[str]:
    """The cells (A1, B1, ...) that head the tables of `sheet`."""
    rels = posixpath.join(posixpath.dirname(sheet), "_rels", posixpath.basename(sheet) + ".rels")
    if rels not in archive.namelist():
        return set()
    cells = set()
    for rel in _xml(archive, rels).iter(_RELS):
        target = rel.get("Target", "")  # relative to the sheet, or from the package's root
        target = (
            target[1:]
            if target.startswith("/")
            else posixpath.normpath(posixpath.join(posixpath.dirname(sheet), target))
        )
        if not rel.get("Type", "").endswith("/table") or target not in archive.namelist():
            continue
        table = _xml(archive, target)
        found = [_CELL.fullmatch(end) for end in table.get("ref", "").split(":")]
        if len(found) == 2 and all(found) and table.get("headerRowCount", "1") != "0":
            (first, row), (last, _) = found[0].groups(), found[1].groups()
            cells |= {f"{_letters(c)}{row}" for c in range(_column(first), _column(last) + 1)}
    return cells


def _strings(archive, names: list[str]) -> tuple[dict, list]:
    """The parts whose strings are translated (name -> parsed root), and those strings: the shared
    ones but those heading a table, and the sheets' inline ones but those heading a table."""
    parts, strings, kept = {}, [], set()
    for sheet in [n for n in names if n.startswith("xl/worksheets/") and n.endswith(".xml")]:
        heads = _header_cells(archive, sheet)
        raw = read_member(archive, sheet, ".xlsx")
        if not heads and b"inlineStr" not in raw:
            continue
        root = parse_xml(raw, sheet, ".xlsx")
        for cell in root.iter(SPREADSHEET.tag("c")):
            held = cell.find(SPREADSHEET.tag("v")) if cell.get("t") == "s" else None
            if cell.get("r") in heads and held is not None and (held.text or "").isdigit():
                kept.add(int(held.text))
            elif cell.get("t") == "inlineStr" and cell.get("r") not in heads:
                strings += cell.findall(SPREADSHEET.tag("is"))
                parts[sheet] = root
    if SHARED in names:
        parts[SHARED] = _xml(archive, SHARED)
        strings += [si for i, si in enumerate(parts[SHARED].iter(SPREADSHEET.tag("si"))) if i not in kept]
    return parts, strings


def translate(data: bytes, job) -> bytes:
    """An .xlsx file with its text translated (the xlsx format's adapter): see the module notes."""
    archive = open_zip(data, ".xlsx")
    names = archive.namelist()
    if "xl/workbook.xml" not in names:
        raise UserError("not an .xlsx file, or a damaged one: it has no xl/workbook.xml")
    parts, strings = _strings(archive, names)
    translate_paragraphs(strings, job.segments, SPREADSHEET)
    changed = {
        name: etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)
        for name, root in parts.items()
    }
    return rewritten(archive, changed, ".xlsx")

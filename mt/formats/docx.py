"""Word documents (.docx): the paragraphs of the body, its tables and text boxes, and every header
and footer translated; styles and everything else in the file kept.

Read and written with python-docx and the lxml tree under it. Within a paragraph, the formatting
most of its text has is the paragraph's own; runs formatted otherwise (bold, italic, a colour) and
hyperlinks become the segment's spans, so the formatting lands on the target words aligned to them.
Tabs, breaks, pictures, bookmarks and the like are voids, moved whole. A paragraph holding field
codes (a table of contents, a page number), tracked changes or content controls is left as it is:
their parts must stay in their order, which a translation cannot promise.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from dataclasses import dataclass

from lxml import etree

from mt.errors import UserError
from mt.formats.archives import open_zip
from mt.formats.spans import Segment, Span, Void

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
KEEP_WHOLE = {"fldChar", "instrText", "ins", "del", "moveFrom", "moveTo", "sdt", "fldSimple"}
BREAKS = {"tab", "br", "cr"}  # voids that part two words


def _w(name: str) -> str:
    return f"{{{W}}}{name}"


def _local(el) -> str:
    return etree.QName(el).localname if isinstance(el.tag, str) else ""


@dataclass
class _Atom:
    """A piece of a paragraph: text or a void, with its run's formatting and its hyperlink."""

    text: str | None
    element: object | None  # a void's element
    rpr: object | None
    link: object | None
    in_run: bool = True  # a void inside a run goes back into a run of its own


@dataclass(frozen=True)
class _Format:
    rpr: object


@dataclass(frozen=True)
class _Link:
    element: object


def _key(rpr) -> bytes:
    return etree.tostring(rpr) if rpr is not None else b""


def _atoms(p) -> list[_Atom] | None:
    """The paragraph's pieces in order, or None where it holds what must stay whole."""
    out: list[_Atom] = []

    def runs(parent, link):
        for child in parent:
            name = _local(child)
            if name in KEEP_WHOLE:
                return False
            if name == "r":
                rpr = child.find(_w("rPr"))
                for part in child:
                    kind = _local(part)
                    if kind in KEEP_WHOLE:
                        return False
                    if kind == "t":
                        out.append(_Atom(part.text or "", None, rpr, link))
                    elif kind != "rPr":
                        out.append(_Atom(None, part, rpr, link))
            elif name == "hyperlink" and link is None:
                if runs(child, child) is False:
                    return False
            elif name != "pPr":
                out.append(_Atom(None, child, None, link, in_run=False))
        return True

    return out if runs(p, None) else None


def _segment(atoms: list[_Atom]) -> tuple[Segment, object]:
    """The atoms as a segment, and the paragraph's own formatting (the one most of its text has)."""
    weight: dict[bytes, int] = {}
    for a in atoms:
        if a.text:
            weight[_key(a.rpr)] = weight.get(_key(a.rpr), 0) + len(a.text)
    base = max(weight, key=weight.get) if weight else b""
    seg, links, formats = Segment(""), [], []
    for a in atoms:
        if a.link is not None and (not links or links[-1][2] is not a.link or links[-1][1] != len(seg.text)):
            links.append([len(seg.text), len(seg.text), a.link])
        if a.text is None:
            breaking = _local(a.element) in BREAKS and not seg.text.endswith(" ")
            within = frozenset({len(links) - 1}) if a.link is not None else frozenset()
            seg.voids.append(Void(len(seg.text), a, within, breaking))
            seg.text += " " if breaking else ""
        elif a.text:
            key = _key(a.rpr)
            if key != base:
                last = formats[-1] if formats else None
                if last and last[1] == len(seg.text) and _key(last[2]) == key and last[3] is a.link:
                    last[1] += len(a.text)
                else:
                    formats.append([len(seg.text), len(seg.text) + len(a.text), a.rpr, a.link])
            seg.text += a.text
        if a.link is not None:
            links[-1][1] = len(seg.text)
    seg.spans = [Span(s, e, _Link(link)) for s, e, link in links] + [Span(s, e, _Format(r)) for s, e, r, _ in formats]
    base_rpr = next((a.rpr for a in atoms if a.text and _key(a.rpr) == base), None)
    return seg, base_rpr


def _run(rpr, child) -> object:
    run = etree.Element(_w("r"))
    if rpr is not None:
        run.append(_copy(rpr))
    run.append(child)
    return run


def _copy(el):
    return etree.fromstring(etree.tostring(el))


def _text(value: str):
    t = etree.Element(_w("t"))
    t.text = value
    t.set(_SPACE, "preserve")
    return t


def _emit(nodes: list, parent, rpr) -> None:
    """Write a translated tree into `parent` (the paragraph or a hyperlink) as runs."""
    for n in nodes:
        if isinstance(n, str):
            if n:
                parent.append(_run(rpr, _text(n)))
        elif n.void:
            atom = n.tag
            parent.append(_run(atom.rpr, atom.element) if atom.in_run else atom.element)
        elif isinstance(n.tag, _Link):
            link = etree.SubElement(parent, n.tag.element.tag, dict(n.tag.element.attrib))
            _emit(n.children, link, rpr)
        else:
            _emit(n.children, parent, n.tag.rpr)


def _paragraphs(document) -> list:
    """Every paragraph of the body (tables and text boxes included), the headers and the footers."""
    from docx.opc.constants import RELATIONSHIP_TYPE as RT

    roots = [document.element.body]
    roots += [rel.target_part.element for rel in document.part.rels.values() if rel.reltype in (RT.HEADER, RT.FOOTER)]
    return [p for root in roots for p in root.iter(_w("p"))]


def translate_docx(data: bytes, translate_segments) -> bytes:
    """A .docx file with its text translated: see the module notes."""
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    open_zip(data, ".docx")  # bounded and readable before python-docx unpacks anything
    try:
        document = docx.Document(io.BytesIO(data))
    except (
        PackageNotFoundError,
        KeyError,
        ValueError,
        etree.XMLSyntaxError,
        zipfile.BadZipFile,
        zlib.error,
        OSError,
    ) as e:
        raise UserError(f"not a .docx file, or a damaged one ({type(e).__name__}: {str(e)[:120]})") from None
    work = []
    for p in _paragraphs(document):
        atoms = _atoms(p)
        if atoms is None or not "".join(a.text or "" for a in atoms).strip():
            continue
        seg, base = _segment(atoms)
        work.append((p, seg, base))
    translated = translate_segments([seg for _, seg, _ in work]) if work else []
    for (p, _, base), nodes in zip(work, translated):
        for child in list(p):
            if _local(child) != "pPr":
                p.remove(child)
        _emit(nodes, p, base)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()

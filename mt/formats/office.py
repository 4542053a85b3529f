"""Paragraphs of formatted runs, as Office Open XML writes them in Word (WordprocessingML),
PowerPoint (DrawingML) and Excel's strings (SpreadsheetML): read out as segments and written back
with their formatting kept.

Within a paragraph, the formatting most of its text has is the paragraph's own; runs formatted
otherwise (bold, italic, a colour, a link) and Word's hyperlinks become the segment's spans, so the
formatting lands on the target words aligned to them. Tabs, breaks, pictures, bookmarks and the like
are voids, moved whole. A paragraph holding what must stay in its order (Word's field codes, tracked
changes, content controls) is left as it is. The dialects differ only in names, in where a link
sits, in what closes a paragraph, and in whether text may stand outside a run: `Dialect` says how.
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from dataclasses import dataclass, replace

from lxml import etree

from mt.errors import UserError
from mt.formats.archives import open_zip
from mt.formats.spans import Segment, Span, Void

_SPACE = "{http://www.w3.org/XML/1998/namespace}space"


@dataclass(frozen=True)
class Dialect:
    namespace: str
    keep_whole: frozenset[str]  # elements a paragraph must then be left as it is for
    breaks: frozenset[str]  # voids that part two words
    lines: frozenset[str]  # of those, the ones that break a line
    link: str | None = None  # the element wrapping linked runs (Word's hyperlink); None: links are run formatting
    closing: frozenset[str] = frozenset()  # a paragraph's last children, kept last (DrawingML's end properties)
    volatile: frozenset[str] = frozenset()  # run attributes that are bookkeeping, not formatting
    preserve_space: bool = False  # text elements say xml:space="preserve" (Word drops edge spaces without it)
    bare_text: bool = False  # an unformatted paragraph is one text element, no run (Excel's plain strings)
    dropped: frozenset[str] = frozenset()  # children that describe the source's text only, left out

    def tag(self, name: str) -> str:
        return f"{{{self.namespace}}}{name}"


WORD = Dialect(
    "http://schemas.openxmlformats.org/wordprocessingml/2006/main",
    keep_whole=frozenset({"fldChar", "instrText", "ins", "del", "moveFrom", "moveTo", "sdt", "fldSimple"}),
    breaks=frozenset({"tab", "br", "cr"}),
    lines=frozenset({"br", "cr"}),
    link="hyperlink",
    preserve_space=True,
)
DRAWING = Dialect(
    "http://schemas.openxmlformats.org/drawingml/2006/main",
    keep_whole=frozenset(),  # a slide's field (a:fld, a slide number) is one element: a void
    breaks=frozenset({"br"}),
    lines=frozenset({"br"}),
    closing=frozenset({"endParaRPr"}),
    volatile=frozenset({"lang", "altLang", "dirty", "err", "noProof", "smtClean", "smtId"}),  # spelling, edits
)
SPREADSHEET = Dialect(
    "http://schemas.openxmlformats.org/spreadsheetml/2006/main",
    keep_whole=frozenset(),
    breaks=frozenset(),
    lines=frozenset(),  # Excel writes a line break as a character (see _texts)
    closing=frozenset({"phoneticPr"}),  # how East Asian readings are shown, kept last
    dropped=frozenset({"rPh"}),  # a reading of source characters, by their offsets: not the translation's
    preserve_space=True,
    bare_text=True,
)


def _local(el) -> str:
    return etree.QName(el).localname if isinstance(el.tag, str) else ""


@dataclass
class _Atom:
    """A piece of a paragraph: text or a void, with its run's formatting and its link."""

    text: str | None
    element: object | None  # a void's element
    rpr: object | None
    link: object | None
    in_run: bool = True  # a void inside a run goes back into a run of its own
    breaking: bool = False  # a line break or tab written as a character in the text


@dataclass(frozen=True)
class _Format:
    rpr: object


@dataclass(frozen=True)
class _Link:
    element: object


def _key(rpr, dialect: Dialect) -> bytes:
    if rpr is None:
        return b""
    if not dialect.volatile or not any(name in rpr.attrib for name in dialect.volatile):
        return etree.tostring(rpr)
    bare = _copy(rpr)
    for name in dialect.volatile:
        bare.attrib.pop(name, None)
    return etree.tostring(bare)


_CONTROL = re.compile(r"([\n\t])")  # written in the text itself (Excel's line breaks, PowerPoint's tabs)


def _texts(value: str, rpr, link, dialect: Dialect) -> list[_Atom]:
    """A text element's atoms: its text, with each line break or tab in it a void of its own (a text
    element holding just that character), so that it parts words and stays where it was."""
    out = []
    for piece in _CONTROL.split(value):
        if piece in ("\n", "\t"):
            element = etree.Element(dialect.tag("t"))
            element.text = piece
            if dialect.preserve_space:
                element.set(_SPACE, "preserve")
            out.append(_Atom(None, element, rpr, link, breaking=True))
        elif piece:
            out.append(_Atom(piece, None, rpr, link))
    return out


def _atoms(p, dialect: Dialect) -> list[_Atom] | None:
    """The paragraph's pieces in order, or None where it holds what must stay whole."""
    out: list[_Atom] = []

    def runs(parent, link):
        for child in parent:
            name = _local(child)
            if name in dialect.keep_whole:
                return False
            if name == "r":
                rpr = child.find(dialect.tag("rPr"))
                for part in child:
                    kind = _local(part)
                    if kind in dialect.keep_whole:
                        return False
                    if kind == "t":
                        out.extend(_texts(part.text or "", rpr, link, dialect))
                    elif kind != "rPr":
                        out.append(_Atom(None, part, rpr, link))
            elif name == "t" and dialect.bare_text:
                out.extend(_texts(child.text or "", None, link, dialect))
            elif name == dialect.link and link is None:
                if runs(child, child) is False:
                    return False
            elif name != "pPr" and name not in dialect.closing and name not in dialect.dropped:
                out.append(_Atom(None, child, None, link, in_run=False))
        return True

    return out if runs(p, None) else None


def _segment(atoms: list[_Atom], dialect: Dialect) -> tuple[Segment, object]:
    """The atoms as a segment, and the paragraph's own formatting (the one most of its text has)."""
    keys = [_key(a.rpr, dialect) if a.text else b"" for a in atoms]
    weight: dict[bytes, int] = {}
    for a, key in zip(atoms, keys):
        if a.text:
            weight[key] = weight.get(key, 0) + len(a.text)
    base = max(weight, key=weight.get) if weight else b""
    seg, links, formats = Segment(""), [], []  # formats: [start, end, run properties, link, key]
    for a, key in zip(atoms, keys):
        if a.link is not None and (not links or links[-1][2] is not a.link or links[-1][1] != len(seg.text)):
            links.append([len(seg.text), len(seg.text), a.link])
        if a.text is None:
            breaking = (a.breaking or _local(a.element) in dialect.breaks) and not seg.text.endswith(" ")
            within = frozenset({len(links) - 1}) if a.link is not None else frozenset()
            line = a.element.text == "\n" if a.breaking else _local(a.element) in dialect.lines
            seg.voids.append(Void(len(seg.text), a, within, breaking, line))
            seg.text += " " if breaking else ""
        elif a.text:
            if key != base:
                last = formats[-1] if formats else None
                if last and last[1] == len(seg.text) and last[4] == key and last[3] is a.link:
                    last[1] += len(a.text)
                else:
                    formats.append([len(seg.text), len(seg.text) + len(a.text), a.rpr, a.link, key])
            seg.text += a.text
        if a.link is not None:
            links[-1][1] = len(seg.text)
    seg.spans = [Span(s, e, _Link(link), frozenset()) for s, e, link in links]
    for s, e, rpr, link, _ in formats:
        held = frozenset(i for i, (a, b, el) in enumerate(links) if el is link and a <= s and e <= b)
        seg.spans.append(Span(s, e, _Format(rpr), held))
    seg.voids = [replace(v, within=v.within | _holding(seg.spans, v.at)) for v in seg.voids]
    base_rpr = next((a.rpr for a, key in zip(atoms, keys) if a.text and key == base), None)
    return seg, base_rpr


def _holding(spans: list[Span], at: int) -> frozenset[int]:
    """The formatting spans a void inside a run lies strictly within."""
    return frozenset(i for i, span in enumerate(spans) if isinstance(span.tag, _Format) and span.start < at < span.end)


def _copy(el):
    return etree.fromstring(etree.tostring(el))


def _emit(nodes: list, parent, rpr, dialect: Dialect) -> None:
    """Write a translated tree into `parent` (the paragraph or a hyperlink) as runs."""

    def run(rpr, child):
        r = etree.SubElement(parent, dialect.tag("r"))
        if rpr is not None:
            r.append(_copy(rpr))
        r.append(child)

    for n in _joined_text(nodes):
        if isinstance(n, str):
            if n:
                t = etree.Element(dialect.tag("t"))
                t.text = n
                if dialect.preserve_space:
                    t.set(_SPACE, "preserve")
                run(rpr, t)
        elif n.void and n.tag.in_run:
            run(n.tag.rpr, n.tag.element)
        elif n.void:
            parent.append(n.tag.element)
        elif isinstance(n.tag, _Link):
            link = etree.SubElement(parent, n.tag.element.tag, dict(n.tag.element.attrib))
            _emit(n.children, link, rpr, dialect)
        else:
            _emit(n.children, parent, n.tag.rpr, dialect)


def _joined_text(nodes: list) -> list:
    """Neighbouring pieces of text as one: one run where a span's placing left two."""
    out: list = []
    for n in nodes:
        if isinstance(n, str) and out and isinstance(out[-1], str):
            out[-1] += n
        else:
            out.append(n)
    return out


def _plain_as_text(p, dialect: Dialect) -> None:
    """Runs with no formatting of their own written as the one text element they amount to."""
    runs = [child for child in p if _local(child) != "pPr"]
    if runs and all(_local(r) == "r" and len(r) == 1 and _local(r[0]) == "t" for r in runs):
        text = etree.SubElement(p, dialect.tag("t"))
        text.text = "".join(r[0].text or "" for r in runs)
        if dialect.preserve_space:
            text.set(_SPACE, "preserve")
        for r in runs:
            p.remove(r)


def translate_paragraphs(paragraphs: list, translate_segments, dialect: Dialect) -> None:
    """Each paragraph element translated in place (one call of `translate_segments` for all): its
    properties stay first, its closing elements last, and its runs between are written anew."""
    work = []
    for p in paragraphs:
        atoms = _atoms(p, dialect)
        if atoms is None or not "".join(a.text or "" for a in atoms).strip():
            continue
        seg, base = _segment(atoms, dialect)
        work.append((p, seg, base))
    translated = translate_segments([seg for _, seg, _ in work]) if work else []
    for (p, _, base), nodes in zip(work, translated):
        closing = [child for child in p if _local(child) in dialect.closing]
        for child in list(p):
            if _local(child) != "pPr":
                p.remove(child)
        _emit(nodes, p, base, dialect)
        if dialect.bare_text:
            _plain_as_text(p, dialect)
        p.extend(closing)


def translate_package(data: bytes, kind: str, load, not_found: type, paragraphs, dialect: Dialect, translate_segments):
    """An Office file (`kind` ".docx" or ".pptx") opened by `load` (python-docx's or python-pptx's,
    which raises `not_found` on what is not its package), the paragraphs `paragraphs` finds in it
    translated, saved again as bytes."""
    open_zip(data, kind)  # bounded and readable before the library unpacks anything
    try:
        package = load(io.BytesIO(data))
        found = paragraphs(package)  # reading the parts a package links to can fail too
    except (not_found, KeyError, ValueError, etree.XMLSyntaxError, zipfile.BadZipFile, zlib.error, OSError) as e:
        raise UserError(f"not a {kind} file, or a damaged one ({type(e).__name__}: {str(e)[:120]})") from None
    translate_paragraphs(found, translate_segments, dialect)
    out = io.BytesIO()
    package.save(out)
    return out.getvalue()

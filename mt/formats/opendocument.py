"""OpenDocument text and presentations (.odt, .odp, as LibreOffice writes them): the text of the
body (paragraphs, headings, lists, tables, text boxes, slides and their notes) and of the page
styles' headers and footers translated, read with lxml (mt/formats/xmltree.py) and OpenDocument's
own vocabulary; every other member of the archive copied byte for byte.

OpenDocument's inline markup is HTML's in other names (`text:span`, `text:a`), and it reads
whitespace as HTML does, with `text:s` for each space past the first. Fields (a page number, a date),
comments and footnote numbers stay as they are; a footnote's text is translated, and parts the
sentence it stands in, as any block inside a paragraph does.
"""

from __future__ import annotations

from mt.errors import UserError
from mt.formats import read_text
from mt.formats.archives import open_zip, read_member, rewritten
from mt.formats.vocabulary import Vocabulary, element_names
from mt.formats.xmltree import Document, translate_documents

FIELDS = (
    "page-number page-count page-continuation date time chapter file-name template-name sequence sequence-ref "
    "bookmark-ref reference-ref note-ref variable-get variable-set user-field-get user-defined author-name "
    "author-initials creation-date creation-time word-count character-count paragraph-count title subject "
    "description keywords initial-creator creator print-date print-time modification-date modification-time "
    "page-variable-get expression text-input"
)
KEPT_BLOCKS = element_names(  # declarations beside the text, and tracked changes: kept whole
    "automatic-styles styles font-face-decls scripts forms sequence-decls variable-decls user-field-decls "
    "tracked-changes"
)
ODF = Vocabulary(
    blocks=element_names("p h"),  # and whatever holds one: lists, cells, text boxes, notes, slides
    untouched=element_names(f"{FIELDS} annotation annotation-end note-citation") | KEPT_BLOCKS,
    untouched_blocks=KEPT_BLOCKS,
    inline=element_names("annotation"),  # a comment holds paragraphs, but sits on words of the sentence
    voids=element_names(
        "s tab line-break soft-page-break bookmark bookmark-start bookmark-end reference-mark reference-mark-start "
        "reference-mark-end change change-start change-end toc-mark toc-mark-start toc-mark-end frame "
        "alphabetical-index-mark alphabetical-index-mark-start alphabetical-index-mark-end"
    ),
    breaking=element_names("s tab line-break"),
    lines=element_names("line-break"),
)
TRANSLATED = ("content.xml", "styles.xml")  # the body; the page styles' headers and footers


def translate(data: bytes, job) -> bytes:
    """An .odt or .odp file with its text translated (their formats' adapter): see the module notes."""
    kind = job.kind
    archive = open_zip(data, kind)
    if "META-INF/manifest.xml" in archive.namelist() and b"encryption-data" in read_member(
        archive, "META-INF/manifest.xml", kind
    ):  # OpenDocument encrypts members itself, inside a plain zip
        raise UserError(f"this {kind} file is encrypted (saved with a password); save it without one")
    names = [name for name in TRANSLATED if name in archive.namelist()]
    if "content.xml" not in names:
        read_member(archive, "content.xml", kind)  # the one-line error for a file without a body
    parts = [
        Document(read_text(read_member(archive, name, kind), name), f"the {kind} file's {name}", ODF) for name in names
    ]
    translate_documents(parts, job.segments)
    return rewritten(archive, {name: part.written().encode("utf-8") for name, part in zip(names, parts)}, kind)

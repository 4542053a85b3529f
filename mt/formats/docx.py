"""Word documents (.docx): the paragraphs of the body, its tables and text boxes, and every header
and footer translated; styles and everything else in the file kept.

Read and written with python-docx and the lxml tree under it; each paragraph's runs go through
mt/formats/office.py (WordprocessingML): runs formatted otherwise than their paragraph and
hyperlinks are spans, tabs, breaks and pictures voids. A paragraph holding field codes (a table of
contents, a page number), tracked changes or content controls is left as it is: their parts must
stay in their order, which a translation cannot promise.
"""

from __future__ import annotations

from mt.formats.office import WORD, translate_package


def _paragraphs(document) -> list:
    """Every paragraph of the body (tables and text boxes included), the headers and the footers."""
    from docx.opc.constants import RELATIONSHIP_TYPE as RT

    roots = [document.element.body]
    roots += [rel.target_part.element for rel in document.part.rels.values() if rel.reltype in (RT.HEADER, RT.FOOTER)]
    return [p for root in roots for p in root.iter(WORD.tag("p"))]


def translate(data: bytes, job) -> bytes:
    """A .docx file with its text translated (the docx format's adapter): see the module notes."""
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    return translate_package(data, ".docx", docx.Document, PackageNotFoundError, _paragraphs, WORD, job.segments)

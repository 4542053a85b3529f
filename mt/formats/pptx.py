"""PowerPoint presentations (.pptx): the text of every slide (shapes, groups, tables) and of its
speaker notes translated; layouts, masters, pictures and everything else in the file kept.

Read and written with python-pptx and the lxml tree under it; each paragraph's runs go through
mt/formats/office.py (DrawingML): runs formatted otherwise than their paragraph (links included)
are spans, line breaks and fields (a slide number) voids.
"""

from __future__ import annotations

from mt.formats.office import DRAWING, translate_package


def _paragraphs(presentation) -> list:
    """Every paragraph of the slides and of their notes, in slide order."""
    roots = []
    for slide in presentation.slides:
        roots.append(slide.element)
        if slide.has_notes_slide:
            roots.append(slide.notes_slide.element)
    return [p for root in roots for p in root.iter(DRAWING.tag("p"))]


def translate(data: bytes, job) -> bytes:
    """A .pptx file with its text translated (the pptx format's adapter): see the module notes."""
    import pptx
    from pptx.exc import PackageNotFoundError

    return translate_package(data, ".pptx", pptx.Presentation, PackageNotFoundError, _paragraphs, DRAWING, job.segments)

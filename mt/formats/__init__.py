"""Formats: what a file is, and how its text is read out and written back with its markup kept.

Each format is a small adapter over one mechanism (mt/formats/spans.py): parse with a well-kept
library into segments of text with inline markup, hand the segments to a translating function,
and write the file again from what comes back. Plain text goes through the documents room as it
is. Nothing here translates: the inference room (mt/inference/formatted.py) passes the function.
"""

from __future__ import annotations

from pathlib import Path

from mt.errors import UserError, require_extra

FORMATS = ("text", "html", "xhtml", "markdown", "srt", "vtt", "docx", "pptx", "xlsx", "odt", "odp", "epub")
EXTENSIONS = {
    ".txt": "text",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "xhtml",
    ".md": "markdown",
    ".markdown": "markdown",
    ".srt": "srt",
    ".vtt": "vtt",
    ".docx": "docx",
    ".pptx": "pptx",
    ".xlsx": "xlsx",
    ".odt": "odt",
    ".odp": "odp",
    ".epub": "epub",
}
BINARY = {"docx", "pptx", "xlsx", "odt", "odp", "epub"}  # zip containers: bytes in, bytes out
MEDIA_TYPES = {
    "text": "text/plain; charset=utf-8",
    "html": "text/html; charset=utf-8",
    "xhtml": "application/xhtml+xml",
    "markdown": "text/markdown; charset=utf-8",
    "srt": "application/x-subrip",
    "vtt": "text/vtt; charset=utf-8",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "odt": "application/vnd.oasis.opendocument.text",
    "odp": "application/vnd.oasis.opendocument.presentation",
    "epub": "application/epub+zip",
}
_ZIP = b"PK\x03\x04"
NEEDS = {  # the parsers each format reads with, all in the `formats` extra
    "html": ("bs4",),
    "xhtml": ("bs4", "lxml"),
    "markdown": ("markdown_it",),
    "srt": ("srt", "bs4"),
    "vtt": ("bs4",),
    "docx": ("docx", "lxml"),
    "pptx": ("pptx", "lxml"),
    "xlsx": ("lxml",),
    "odt": ("lxml", "bs4"),
    "odp": ("lxml", "bs4"),
    "epub": ("lxml", "bs4"),
    "text": (),
}


def _parsers(fmt: str) -> None:
    for module in NEEDS[fmt]:
        require_extra(module, "formats", f"translating {fmt}")


def format_of(path: str | Path | None, forced: str | None = None) -> str:
    """The format a file's name says (or `forced`, when given): text for standard input."""
    if forced:
        if forced not in FORMATS:
            raise UserError(f"unknown document format {forced!r}; choose one of {', '.join(FORMATS)}")
        return forced
    if path is None:
        return "text"
    suffix = Path(str(path)).suffix.lower()
    if suffix not in EXTENSIONS:
        known = ", ".join(sorted(EXTENSIONS))
        raise UserError(f"cannot tell the format of {path} from its extension ({known}); name it with --input-format")
    return EXTENSIONS[suffix]


def check_kind(data: bytes, fmt: str, name: str) -> None:
    """A file whose bytes are not what its format says is a one-line error before any parsing."""
    if fmt in BINARY and not data.startswith(_ZIP):
        raise UserError(f"{name} is not a .{fmt} file: it is not a zip archive (encrypted, truncated or misnamed?)")
    if fmt not in BINARY and data.startswith(_ZIP):
        raise UserError(
            f"{name} is a zip archive (an Office, OpenDocument or EPUB file?), not {fmt} text; name it as it is"
        )


def translate_bytes(
    data: bytes, fmt: str, translate_segments, translate_text, name: str = "the input", target_lang=None
) -> bytes:
    """A file's bytes in format `fmt`, translated: `translate_segments` takes segments (the markup
    formats), `translate_text` plain text's lines; a page's `lang` becomes `target_lang`."""
    from mt.formats.html import read_text

    _parsers(fmt)
    check_kind(data, fmt, name)
    if fmt == "docx":
        from mt.formats.docx import translate_docx

        return translate_docx(data, translate_segments)
    if fmt == "pptx":
        from mt.formats.pptx import translate_pptx

        return translate_pptx(data, translate_segments)
    if fmt == "xlsx":
        from mt.formats.xlsx import translate_xlsx

        return translate_xlsx(data, translate_segments)
    if fmt in ("odt", "odp"):
        from mt.formats.opendocument import translate_opendocument

        return translate_opendocument(data, translate_segments, f".{fmt}")
    if fmt == "epub":
        from mt.formats.epub import translate_epub

        return translate_epub(data, translate_segments, target_lang)
    return translate_string(read_text(data, name), fmt, translate_segments, translate_text, target_lang).encode("utf-8")


def translate_string(text: str, fmt: str, translate_segments, translate_text, target_lang=None) -> str:
    """A text in format `fmt` (not a zip container), translated."""
    _parsers(fmt)
    if fmt in ("html", "xhtml"):
        from mt.formats.html import translate_html

        return translate_html(text, translate_segments, xhtml=fmt == "xhtml", target_lang=target_lang)
    if fmt == "markdown":
        from mt.formats.markdown import translate_markdown

        return translate_markdown(text, translate_segments)
    if fmt == "srt":
        from mt.formats.subtitles import translate_srt

        return translate_srt(text, translate_segments)
    if fmt == "vtt":
        from mt.formats.subtitles import translate_vtt

        return translate_vtt(text, translate_segments)
    if fmt in BINARY:
        raise UserError(f"a .{fmt} file is a zip archive: give it as a file, not as text")
    return translate_text(text)

"""Formats: what a file is, and how its text is read out and written back with its markup kept.

Each format is one `Format` entry: its name, the extensions that say it, its media type, the
parsers it needs and its adapter, a small module over one mechanism (mt/formats/spans.py): parse
with the library made for the format into segments of text with inline markup, hand the segments
to a translating function, and write the file again from what comes back. HTML is read with
BeautifulSoup, which repairs what is malformed; XML (XHTML, EPUB, OpenDocument, Office) with
lxml.etree, whose nodes keep their namespaces; Markdown with markdown-it-py; subtitles by their own
small readers. Plain text goes through the documents room as it is. Nothing here translates: the
inference room (mt/inference/formatted.py) passes the functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

from mt.errors import UserError, require_extra


@dataclass(frozen=True)
class Job:
    """What an adapter is given beside the document: `segments` translates segments (lists of text
    and Elements back), `text` plain text; `target_lang` is declared where the document says its
    language; `name` names the document in errors and `kind` is its extension (".odt")."""

    segments: Callable
    text: Callable[[str], str]
    target_lang: str | None = None
    name: str = "the input"
    kind: str = ""


@dataclass(frozen=True)
class Format:
    """One document format. `needs`: the modules of the `formats` extra it is read with. `adapter`: the
    module of mt.formats whose `translate(source, job)` translates it, imported only when used, as
    its parsers are optional (None: plain text, which the documents room translates). A `binary`
    format is a zip container: bytes in, bytes out; any other is text."""

    name: str
    extensions: tuple[str, ...]
    media_type: str
    needs: tuple[str, ...] = ()
    adapter: str | None = None
    binary: bool = False

    def translate(self, source: bytes | str, job: Job) -> bytes | str:
        """`source` translated by this format's adapter, its parsers checked first."""
        for module in self.needs:
            require_extra(module, "formats", f"translating {self.name}")
        if self.adapter is None:
            return job.text(source)
        return import_module(f"mt.formats.{self.adapter}").translate(source, job)


_OFFICE = "application/vnd.openxmlformats-officedocument"
_ODF = "application/vnd.oasis.opendocument"
ENTRIES = (
    Format("text", (".txt",), "text/plain; charset=utf-8"),
    Format("html", (".html", ".htm"), "text/html; charset=utf-8", ("bs4",), "html"),
    Format("xhtml", (".xhtml",), "application/xhtml+xml", ("lxml",), "xhtml"),
    Format("markdown", (".md", ".markdown"), "text/markdown; charset=utf-8", ("markdown_it",), "markdown"),
    Format("srt", (".srt",), "application/x-subrip", ("srt",), "subrip"),
    Format("vtt", (".vtt",), "text/vtt; charset=utf-8", (), "webvtt"),
    Format("docx", (".docx",), f"{_OFFICE}.wordprocessingml.document", ("docx", "lxml"), "docx", True),
    Format("pptx", (".pptx",), f"{_OFFICE}.presentationml.presentation", ("pptx", "lxml"), "pptx", True),
    Format("xlsx", (".xlsx",), f"{_OFFICE}.spreadsheetml.sheet", ("lxml",), "xlsx", True),
    Format("odt", (".odt",), f"{_ODF}.text", ("lxml",), "opendocument", True),
    Format("odp", (".odp",), f"{_ODF}.presentation", ("lxml",), "opendocument", True),
    Format("epub", (".epub",), "application/epub+zip", ("lxml",), "epub", True),
)
# What other modules read, each made from the entries.
FORMATS = tuple(entry.name for entry in ENTRIES)
EXTENSIONS = {ext: entry.name for entry in ENTRIES for ext in entry.extensions}
MEDIA_TYPES = {entry.name: entry.media_type for entry in ENTRIES}
BINARY = {entry.name for entry in ENTRIES if entry.binary}
_BY_NAME = {entry.name: entry for entry in ENTRIES}
_ZIP = b"PK\x03\x04"


def entry(name: str) -> Format:
    """The format named `name`; an unknown name is a one-line error."""
    if name not in _BY_NAME:
        raise UserError(f"unknown document format {name!r}; choose one of {', '.join(FORMATS)}")
    return _BY_NAME[name]


def format_of(path: str | Path | None, forced: str | None = None) -> str:
    """The format a file's name says (or `forced`, when given): text for standard input."""
    if forced:
        return entry(forced).name
    if path is None:
        return "text"
    suffix = Path(str(path)).suffix.lower()
    if suffix not in EXTENSIONS:
        known = ", ".join(sorted(EXTENSIONS))
        raise UserError(f"cannot tell the format of {path} from its extension ({known}); name it with --input-format")
    return EXTENSIONS[suffix]


def check_kind(data: bytes, fmt: str, name: str) -> None:
    """A file whose bytes are not what its format says is a one-line error before any parsing."""
    if entry(fmt).binary and not data.startswith(_ZIP):
        raise UserError(f"{name} is not a .{fmt} file: it is not a zip archive (encrypted, truncated or misnamed?)")
    if not entry(fmt).binary and data.startswith(_ZIP):
        raise UserError(
            f"{name} is a zip archive (an Office, OpenDocument or EPUB file?), not {fmt} text; name it as it is"
        )


def read_text(data: bytes, what: str) -> str:
    """A file's text: UTF-8 (a byte-order mark allowed), else a one-line error."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserError(f"{what} is not UTF-8 text (byte {e.start}); convert it first, e.g. with iconv") from None


def translate_bytes(
    data: bytes, fmt: str, translate_segments, translate_text, name: str = "the input", target_lang=None
) -> bytes:
    """A file's bytes in format `fmt`, translated: `translate_segments` takes segments (the markup
    formats), `translate_text` plain text; a document's declared language becomes `target_lang`."""
    found = entry(fmt)
    check_kind(data, fmt, name)
    job = Job(translate_segments, translate_text, target_lang, name, found.extensions[0])
    if found.binary:
        return found.translate(data, job)
    return found.translate(read_text(data, name), job).encode("utf-8")


def translate_string(text: str, fmt: str, translate_segments, translate_text, target_lang=None) -> str:
    """A text in format `fmt` (not a zip container), translated."""
    found = entry(fmt)
    if found.binary:
        raise UserError(f"a .{fmt} file is a zip archive: give it as a file, not as text")
    return found.translate(text, Job(translate_segments, translate_text, target_lang, kind=found.extensions[0]))

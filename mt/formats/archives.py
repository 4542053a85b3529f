"""Zip containers (Office, OpenDocument, EPUB) opened safely: what a file could make the reader
unpack is bounded before anything is read, a file that is not a zip, or is encrypted or truncated,
is one line, and a member read as XML is read strictly, with no entity or DTD resolved.

The bounds are the members' sizes as the archive declares them, which zipfile holds each member to
as it reads (it stops there, and a member that says less than it holds fails its check). A server
sets them from its own limits (`bounded`); elsewhere they are the constants below."""

from __future__ import annotations

import contextlib
import io
import zipfile
import zlib
from contextvars import ContextVar
from dataclasses import dataclass

from lxml import etree

from mt.errors import UserError

MAX_MEMBERS = 10_000
MAX_UNPACKED = 512 << 20  # bytes, all members together
MAX_RATIO = 200  # unpacked / packed, per member: far above text's, far below a zip bomb's
MAX_PARSED = 64 << 20  # bytes of one member read as XML: a chapter, a Word document's body
PARSED = (".xml", ".xhtml", ".html", ".htm", ".opf", ".ncx", ".rels")
UNPACKED_PER_BYTE = 16  # a server's bound on what a file unpacks to, per byte it may upload
MARKUP_PER_CHAR = 64  # and on the markup it parses, per character of text a document may hold
XML = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)  # strict: nothing outside is read


class TooLarge(UserError):
    """An archive past a bound: the request is too large, not malformed."""


@dataclass(frozen=True)
class Bounds:
    """What an archive may unpack to (all members), and the markup it may hold (each member read as
    XML, and all of them together); `flags` name the settings they follow, for the message."""

    unpacked: int = MAX_UNPACKED
    parsed: int = MAX_PARSED
    markup: int = MAX_UNPACKED
    flags: tuple[str, str] = ("", "")

    @classmethod
    def following(cls, file_bytes: int, document_chars: int) -> Bounds:
        """A server's bounds, following its --max-file-bytes and --max-document-chars."""
        markup = MARKUP_PER_CHAR * document_chars
        return cls(UNPACKED_PER_BYTE * file_bytes, markup, markup, (" (--max-file-bytes)", " (--max-document-chars)"))


_bounds: ContextVar[Bounds | None] = ContextVar("archive_bounds", default=None)


@contextlib.contextmanager
def bounded(bounds: Bounds | None):
    """Archives opened inside (in this thread or task) are held to `bounds` (None: the defaults)."""
    token = _bounds.set(bounds)
    try:
        yield
    finally:
        _bounds.reset(token)


def open_zip(data: bytes, kind: str) -> zipfile.ZipFile:
    """`data` as a zip archive of a `kind` file (".docx", ".pptx", ".odt", ".epub"), checked: not
    encrypted, and no more members, unpacked bytes or compression than a document needs."""
    if data[:8] == b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1":  # an OLE container: how Office stores encrypted files
        raise UserError(f"this {kind} file is encrypted (or an old binary Office file); save it unencrypted as {kind}")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as e:
        raise UserError(f"not a {kind} file, or a truncated one: it is not a readable zip archive ({e})") from None
    if len(members) > MAX_MEMBERS:
        raise TooLarge(f"the {kind} file holds {len(members):,} members; at most {MAX_MEMBERS:,} are read")
    _check_sizes(members, kind, _bounds.get() or Bounds())
    for m in members:
        if m.flag_bits & 0x1:
            raise UserError(f"the {kind} file is encrypted ({m.filename}); save it unencrypted")
        if m.file_size > 1 << 20 and m.file_size > MAX_RATIO * max(m.compress_size, 1):
            raise UserError(
                f"the {kind} file's {m.filename} unpacks {m.file_size // max(m.compress_size, 1)}-fold; refused"
            )
    return archive


def _check_sizes(members: list[zipfile.ZipInfo], kind: str, bounds: Bounds) -> None:
    """The declared sizes against `bounds`: all members unpacked, the markup together and each part."""
    unpacked = sum(m.file_size for m in members)
    if unpacked > bounds.unpacked:
        raise TooLarge(
            f"the {kind} file unpacks to {unpacked:,} bytes; at most {bounds.unpacked:,} are read{bounds.flags[0]}"
        )
    markup = [m for m in members if m.filename.lower().endswith(PARSED)]
    for m in markup:
        if m.file_size > bounds.parsed:
            raise TooLarge(
                f"the {kind} file's {m.filename} unpacks to {m.file_size:,} bytes of markup; "
                f"at most {bounds.parsed:,} are read{bounds.flags[1]}"
            )
    if (total := sum(m.file_size for m in markup)) > bounds.markup:
        raise TooLarge(
            f"the {kind} file holds {total:,} bytes of markup; at most {bounds.markup:,} are read{bounds.flags[1]}"
        )


def read_member(archive: zipfile.ZipFile, name: str, kind: str) -> bytes:
    """One member's bytes; a damaged one is a one-line error."""
    try:
        return archive.read(name)
    except KeyError:
        raise UserError(f"the {kind} file has no {name}; is it really a {kind} file?") from None
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, zlib.error) as e:
        raise UserError(f"the {kind} file is damaged: {name} cannot be read ({e})") from None


def parse_xml(data: bytes, name: str, kind: str | None = None):
    """`data` as an XML tree (its root element), read by the strict parser; not well-formed is a
    one-line error naming `name`, the member of a `kind` file that it is (a lone document: no kind)."""
    try:
        return etree.fromstring(data, XML)
    except etree.XMLSyntaxError as e:
        where = f"the {kind} file's {name}" if kind else name
        raise UserError(f"{where} is not well-formed XML ({e})") from None


def rewritten(archive: zipfile.ZipFile, changed: dict[str, bytes], kind: str) -> bytes:
    """The archive again, member for member in its order and with its compression, `changed`
    members replaced: every other member's bytes as they were."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as new:
        for info in archive.infolist():
            data = changed[info.filename] if info.filename in changed else read_member(archive, info.filename, kind)
            new.writestr(info, data)
    return out.getvalue()

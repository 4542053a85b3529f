"""Files: text lines read one way everywhere, and durable writes (readers see the old file or the
whole new one, never a part of either)."""

from __future__ import annotations

import gzip
import hashlib
import lzma
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from mt.errors import UserError


def _decoded(line: bytes, source: str, number: int) -> str:
    """One line's bytes (its newline, if any, included) as text; invalid UTF-8 is a UserError."""
    try:
        return line.rstrip(b"\n").decode("utf-8").rstrip("\r")
    except UnicodeDecodeError as e:
        raise UserError(
            f"{source} line {number}: invalid UTF-8 ({e.reason} at byte {e.start}); fix or re-encode it"
        ) from None


def split_lines(raw: bytes, source: str) -> list[str]:
    """The lines of UTF-8 `raw` (a last newline ends the last line, '\\r\\n' counts as a newline);
    invalid UTF-8 is a UserError naming `source` and the line."""
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [_decoded(line, source, number) for number, line in enumerate(lines, 1)]


def _open(path: Path):
    """`path` opened for reading bytes, through gzip or xz where its name ends in .gz or .xz."""
    name = str(path)
    opener = gzip.open if name.endswith(".gz") else lzma.open if name.endswith(".xz") else open
    try:
        return opener(path, "rb")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None


def _unreadable(path: Path, e: Exception) -> UserError:
    name = str(path)
    kind = "gzip" if name.endswith(".gz") else "xz" if name.endswith(".xz") else "text"
    return UserError(f"{path}: not a readable {kind} file ({e})")


def read_lines(path: Path) -> list[str]:
    """Lines of a UTF-8 text file (gzip if it ends in .gz, xz if in .xz)."""
    try:
        with _open(path) as f:
            return split_lines(f.read(), str(path))
    except (gzip.BadGzipFile, lzma.LZMAError, EOFError) as e:
        raise _unreadable(path, e) from None


def count_lines(path: Path) -> int:
    """How many lines `read_lines` would return, read as a stream: the file is never held whole."""
    try:
        with _open(path) as f:
            return sum(1 for _ in f)
    except (gzip.BadGzipFile, lzma.LZMAError, EOFError) as e:
        raise _unreadable(path, e) from None


def read_chosen_lines(path: Path, rows) -> tuple[list[str], int]:
    """The lines numbered `rows` (ascending, from 0) of a file read as `read_lines` reads it, and how
    many lines it has: read as a stream, so memory holds the chosen lines only."""
    out, wanted, total = [], iter(rows), 0
    want = next(wanted, None)
    try:
        with _open(path) as f:
            for total, line in enumerate(f, 1):
                if total - 1 == want:
                    out.append(_decoded(line, str(path), total))
                    want = next(wanted, None)
    except (gzip.BadGzipFile, lzma.LZMAError, EOFError) as e:
        raise _unreadable(path, e) from None
    return out, total


def output_file(path: str | Path, flag: str) -> Path:
    """A file a command will write when its work is done, checked before the work starts, so that
    an hour of translation is not lost to a typo in a folder's name."""
    path = Path(path)
    folder = path.parent
    if path.is_dir():
        raise UserError(f"{flag} {path} is a folder; give a file name")
    if not folder.is_dir():
        raise UserError(f"{flag} {path}: no folder {folder}; create it first")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {path}: the folder {folder} is not writable")
    return path


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[str], None]) -> None:
    """Call write(temporary_name) for a file in `path`'s folder, flush it to disk, rename it over
    `path` and flush the folder, so that even a power loss leaves the old file or the new one. A
    write that fails (a full disk) leaves the old file as it was and is reported in one line."""
    path, tmp = Path(path), None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
        os.close(fd)
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as e:
        raise UserError(
            f"could not write {path} ({e.strerror or e}); the previous file, if any, is unchanged"
        ) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def sha256_of(path: Path) -> str:
    """A file's SHA-256 in hex, read a mebibyte at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()

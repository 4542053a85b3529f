"""Technical text translated by people, read from the forms its projects publish: gettext
catalogues (Python's and Django's documentation), help pages whose paragraphs carry the same ids in
both languages (LibreOffice), and numbered Markdown (the machine-learning cheatsheets).

Each reader gives (English, French) pairs with the page they came from. The catalog keeps the
published files; the pairs are extracted from them once and written beside them, one pair a line
in two files a split, which the loader then reads (and draws from) like any other corpus. The
splits go by page, so that no page is in two: about one page in twenty validates, one in twenty
tests, the rest trains.
"""

from __future__ import annotations

import hashlib
import html
import io
import re
import tarfile
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path

from mt.errors import UserError
from mt.files import atomic_write

Pair = tuple[str, str, str]  # (page, English, French)
SPLITS = ("train", "valid", "test")
PAGES_A_SPLIT = 20  # one page in this many validates, one tests
GETTEXT_RUN = 100  # consecutive entries taken as one page where a catalogue names no source document

_ROLE = re.compile(r":[\w:.+-]+:`(~|!)?([^`<]*?)\s*(?:<[^>]*>)?`")  # :func:`print`, :ref:`text <target>`
_LINK = re.compile(r"`([^`<]+?)\s*(?:<[^>]*>)?`_{1,2}")  # `text <url>`_
_LITERAL = re.compile(r"``(.+?)``")
_EMPHASIS = re.compile(r"(\*{1,2})(\S(?:.*?\S)?)\1")
_SUBSTITUTION = re.compile(r"\|(\w[\w -]*)\|")


def rest_text(text: str) -> str:
    """reStructuredText inline markup as the reader sees it: roles and links by their text,
    literals and emphasis without their marks, whitespace collapsed."""
    text = _ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) == "~" else m.group(2), text)
    text = _LINK.sub(r"\1", text)
    text = _LITERAL.sub(r"\1", text)
    text = _EMPHASIS.sub(r"\2", text)
    text = _SUBSTITUTION.sub(r"\1", text)
    return " ".join(text.split())


def gettext_pairs(archive: Path, member_pattern: str) -> Iterator[Pair]:
    """Every translated entry of the .po catalogues in `archive` (a .tar.gz) whose path matches
    `member_pattern`: msgid English, msgstr French; empty, fuzzy, obsolete and plural entries
    left out, reStructuredText markup cleaned."""
    import polib

    pattern = re.compile(member_pattern)
    for name, data in _tar_members(archive, lambda n: n.endswith(".po") and pattern.search(n)):
        try:
            catalogue = polib.pofile(data.decode("utf-8"))
        except (UnicodeDecodeError, OSError, ValueError) as e:
            raise UserError(f"{archive}: {name} is not a gettext catalogue ({e})") from None
        for i, entry in enumerate(catalogue):
            if entry.obsolete or "fuzzy" in entry.flags or entry.msgid_plural or not entry.msgstr.strip():
                continue
            # the page: the document the entry comes from, else a run of the catalogue's entries
            # (one catalogue can hold a whole part of a manual, its documents one after another)
            page = entry.occurrences[0][0] if entry.occurrences else f"{name}#{i // GETTEXT_RUN}"
            yield page, rest_text(entry.msgid), rest_text(entry.msgstr)


_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _IdTexts(HTMLParser):
    """The text of each element whose id names a help paragraph or heading (par_id…, hd_id…)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.texts: dict[str, str] = {}
        self._open: list[str] = []  # the element being read: its tag, and the tags open inside it
        self._id, self._parts = "", []

    def handle_starttag(self, tag, attrs):
        if self._open:
            if tag not in _VOID:
                self._open.append(tag)
            return
        found = dict(attrs).get("id") or ""
        if found.startswith(("par_id", "hd_id")) and found not in self.texts:
            self._open, self._id, self._parts = [tag], found, []

    def handle_endtag(self, tag):
        if tag not in self._open:  # a stray end tag closes nothing
            return
        while self._open.pop() != tag:  # an element left open inside: closed with it
            pass
        if not self._open:
            self.texts[self._id] = " ".join("".join(self._parts).split())

    def handle_data(self, data):
        if self._open:
            self._parts.append(data)


def help_pairs(english: Path, french: Path) -> Iterator[Pair]:
    """The paragraphs and headings of LibreOffice's help pages, joined by page and id across the
    English and the French package (Debian .deb files)."""
    pages = {lang: dict(_help_pages(path, lang)) for lang, path in (("en-US", english), ("fr", french))}
    for page in sorted(pages["en-US"].keys() & pages["fr"].keys()):
        en, fr = pages["en-US"][page], pages["fr"][page]
        for key in sorted(en.keys() & fr.keys()):  # an order of its own: the draws are reproducible
            yield page, en[key], fr[key]


def _help_pages(deb: Path, lang: str) -> Iterator[tuple[str, dict[str, str]]]:
    prefix = f"usr/share/libreoffice/help/{lang}/text/"
    data = _ar_member(deb, "data.tar.xz")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as tar:
        for member in tar:
            name = member.name.removeprefix("./")
            if member.isfile() and name.startswith(prefix) and name.endswith(".html"):
                parser = _IdTexts()
                parser.feed(tar.extractfile(member).read().decode("utf-8", "replace"))
                yield name[len(prefix) :], parser.texts


def _ar_member(path: Path, wanted: str) -> bytes:
    """A member of a Unix ar archive (a Debian package holds its files in one: data.tar.xz)."""
    with open(path, "rb") as f:
        if f.read(8) != b"!<arch>\n":
            raise UserError(f"{path} is not a Debian package (no ar archive header)")
        while header := f.read(60):
            name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58])
            if name == wanted:
                return f.read(size)
            f.seek(size + size % 2, io.SEEK_CUR)
    raise UserError(f"{path} holds no {wanted}")


_NUMBERED = re.compile(r"^\*\*(\d+)\.\s*(.*?)\*\*\s*$")
_ARROW = "&#10230;"


def cheatsheet_pairs(archive: Path) -> Iterator[Pair]:
    """The cheatsheets' numbered items: template/<sheet>.md holds each number's English, and
    fr/<sheet>.md the same numbers, each followed by an arrow and the French."""
    sheets: dict[str, dict[str, dict[int, str]]] = {"template": {}, "fr": {}}
    for name, data in _tar_members(archive, lambda n: re.search(r"/(template|fr)/[^/]+\.md$", n)):
        folder, sheet = name.split("/")[-2:]
        sheets[folder][sheet] = _numbered(data.decode("utf-8"), english=folder == "template")
    for sheet in sorted(sheets["template"].keys() & sheets["fr"].keys()):
        en, fr = sheets["template"][sheet], sheets["fr"][sheet]
        for number in sorted(en.keys() & fr.keys()):
            yield sheet, en[number], fr[number]


def _numbered(text: str, english: bool) -> dict[int, str]:
    """Each numbered item's English (`english`), or the French on the arrow's line after it."""
    found, number = {}, None
    for line in text.splitlines():
        if m := _NUMBERED.match(line.strip()):
            number = int(m.group(1))
            if english:
                found[number] = _markdown_text(m.group(2))
        elif not english and number is not None and line.strip().startswith(_ARROW):
            found[number] = _markdown_text(line.strip()[len(_ARROW) :])
            number = None
    return {k: v for k, v in found.items() if v}


def _markdown_text(text: str) -> str:
    text = re.sub(r"\*{1,2}([^*]+)\*{1,2}", r"\1", html.unescape(text))
    return " ".join(text.split())


def _tar_members(archive: Path, wanted: Callable[[str], object]) -> Iterator[tuple[str, bytes]]:
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                if member.isfile() and wanted(member.name):
                    yield member.name, tar.extractfile(member).read()
    except (tarfile.TarError, EOFError, OSError) as e:
        raise UserError(f"{archive}: not a readable archive ({e}); fetch it again") from None


def split_of(page: str) -> str:
    """The split a page's pairs go to, fixed by its name alone."""
    bucket = int(hashlib.sha256(page.encode()).hexdigest(), 16) % PAGES_A_SPLIT
    return "valid" if bucket == 0 else "test" if bucket == 1 else "train"


def write_splits(pairs: Iterator[Pair], folder: Path) -> dict[str, int]:
    """The pairs written as `folder`/<split>.en and .fr, one pair a line (each file whole or not at
    all), pairs with an empty side or a line break dropped; the pairs in each split."""
    sides: dict[str, tuple[list[str], list[str]]] = {split: ([], []) for split in SPLITS}
    for page, en, fr in pairs:
        if en and fr and en != fr and "\n" not in en + fr:
            english, french = sides[split_of(page)]
            english.append(en)
            french.append(fr)
    folder.mkdir(parents=True, exist_ok=True)
    for split, (en, fr) in sides.items():
        for lang, lines in (("en", en), ("fr", fr)):
            text = "".join(line + "\n" for line in lines)
            atomic_write(folder / f"{split}.{lang}", lambda tmp, t=text: Path(tmp).write_text(t, encoding="utf-8"))
    return {split: len(en) for split, (en, _) in sides.items()}

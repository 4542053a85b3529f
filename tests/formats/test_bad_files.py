"""Files that are not what they say, encrypted, truncated, or built to blow up when unpacked: one
line each, before any parsing, and nothing written."""

import io
import re
import zipfile

import pytest
from helpers import Upper

pytest.importorskip("docx", reason="the formats extra is not installed (pip install 'mt[formats]')")

from mt.errors import UserError  # noqa: E402
from mt.formats import archives  # noqa: E402
from mt.inference.formatted import translate_formatted  # noqa: E402


def zipped(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return out.getvalue()


def a_docx() -> bytes:
    import docx

    out = io.BytesIO()
    docx.Document().save(out)
    return out.getvalue()


@pytest.mark.parametrize(
    "data, fmt, message",
    [
        (b"<p>une page</p>", "docx", "not a .docx file: it is not a zip archive"),
        (b"PK\x03\x04 whatever", "html", "is a zip archive (an Office, OpenDocument or EPUB file?), not html"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600, "docx", "not a .docx file"),
        (b"<p>caf\xe9</p>", "html", "is not UTF-8 text"),
        (b"1\nnot a timing\nhello\n", "srt", "not a SubRip (.srt) file"),
        (zipped({"a.txt": b"x"}), "epub", "has no META-INF/container.xml"),
        (zipped({"word/document.xml": b"<not/>"}), "docx", "not a .docx file, or a damaged one"),
        (zipped({"ppt/presentation.xml": b"<not/>"}), "pptx", "not a .pptx file, or a damaged one"),
        (b"<p>une page</p>", "pptx", "not a .pptx file: it is not a zip archive"),
        (zipped({"META-INF/manifest.xml": b"<m><encryption-data/></m>", "content.xml": b"\x8f"}), "odt", "encrypted"),
        (zipped({"styles.xml": b"<x/>"}), "odp", "the .odp file has no content.xml"),
    ],
)
def test_a_file_that_is_not_what_its_format_says_is_one_line(data, fmt, message):
    with pytest.raises(UserError, match=re.escape(message)) as caught:
        translate_formatted(Upper(), data, fmt, name="the file")
    assert "\n" not in str(caught.value)


def test_encrypted_and_truncated_office_files_are_named_as_such():
    with pytest.raises(UserError, match="encrypted"):
        archives.open_zip(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600, ".docx")
    whole = a_docx()
    with pytest.raises(UserError, match="truncated"):
        translate_formatted(Upper(), whole[: len(whole) // 2], "docx")


def test_a_zip_bomb_is_refused_before_anything_is_unpacked(monkeypatch):
    with pytest.raises(UserError, match="unpacks .*-fold"):
        archives.open_zip(zipped({"word/document.xml": b"\0" * (8 << 20)}), ".docx")
    monkeypatch.setattr(archives, "MAX_MEMBERS", 3)
    with pytest.raises(UserError, match="holds 4 members"):
        archives.open_zip(zipped({f"m{i}": b"x" for i in range(4)}), ".epub")
    with archives.bounded(archives.Bounds(unpacked=1000)), pytest.raises(UserError, match="unpacks to 2,000 bytes"):
        archives.open_zip(zipped({"a": b"y" * 1000, "b": b"z" * 1000}), ".epub")


def test_the_text_a_document_may_hold_is_bounded():
    with pytest.raises(UserError, match="the limit is 100"):
        translate_formatted(Upper(), "<p>" + "mot " * 50 + "</p>", "html", max_chars=100)

"""Documents through the command and the server, with a real (tiny) model: a web page file and a
page given as a string, the format from the extension or the flag, and bad files refused in one line."""

import re

import pytest
from helpers import cli

from mt.errors import UserError

bs4 = pytest.importorskip("bs4", reason="the formats extra is not installed (pip install 'mt[formats]')")

PAGE = (
    '<!DOCTYPE html>\n<html lang="fr"><body><p>le <b>chat</b> noir</p><ul><li>le chien blanc</li></ul></body></html>\n'
)


def test_a_web_page_file_is_translated_with_its_markup(run_dir, tmp_path):
    (tmp_path / "page.html").write_text(PAGE)
    out = tmp_path / "page.en.html"
    result = cli(
        "mt.translate",
        "--model",
        str(run_dir),
        "--greedy",
        "--input",
        str(tmp_path / "page.html"),
        "--output",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    soup = bs4.BeautifulSoup(out.read_text(), "html.parser")
    assert soup.p.get_text() == "the black cat" and soup.b.get_text() == "cat" and soup.li.get_text() == "the white dog"
    assert out.read_text().startswith('<!DOCTYPE html>\n<html lang="en">')


def test_a_string_in_a_format_and_the_plain_text_default(run_dir):
    html = cli(
        "mt.translate", "--model", str(run_dir), "--greedy", "--input-format", "html", "<p>le <b>chat</b> noir</p>"
    )
    assert html.returncode == 0 and html.stdout == "<p>the black <b>cat</b></p>\n", html.stderr
    plain = cli("mt.translate", "--model", str(run_dir), "--greedy", "<p>le chat noir</p>")
    assert plain.returncode == 0 and "<p>" not in plain.stdout  # text is text: markup goes through as words


@pytest.mark.parametrize(
    "name, data, flags, message",
    [
        ("report.docx", b"<p>not a word file</p>", ["--output", "x.docx"], "is not a .docx file"),
        ("page.html", b"PK\x03\x04 a zip", [], "is a zip archive"),
        ("page.html", b"<p>ok</p>", ["--n-best", "2", "--beam", "2"], "--n-best take plain text, not a html document"),
        ("book.epub", b"PK\x03\x04", [], "is written to a file: give --output"),
    ],
)
def test_bad_documents_are_refused_before_the_model_loads(tmp_path, name, data, flags, message):
    from mt import translate

    (tmp_path / name).write_bytes(data)
    args = translate.parse_args(["--input", str(tmp_path / name), *flags])
    with pytest.raises(UserError, match=re.escape(message)):
        translate.read_document(args, translate.document_format(args))


def test_a_bad_document_is_one_line_and_exit_2_from_the_command(tmp_path):
    (tmp_path / "report.docx").write_bytes(b"<p>not a word file</p>")
    out = tmp_path / "report.en.docx"
    result = cli("mt.translate", "--model", str(tmp_path / "no-such-run"), "--input", str(tmp_path / "report.docx"),
                 "--output", str(out))  # fmt: skip
    assert result.returncode == 2 and "is not a .docx file" in result.stderr and len(result.stderr.splitlines()) == 1
    assert not out.exists()


def test_a_trained_model_places_tags_and_keeps_namespaces_in_xhtml_and_opendocument(run_dir):
    """The tiny model reorders ("le chat noir" -> "the black cat"): its own attention places the tags."""
    import io
    import zipfile

    from helpers import xml_names

    from mt.inference.formatted import translate_formatted
    from mt.inference.translator import Translator

    translator = Translator.load(run_dir)
    page = (
        '<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops" lang="fr"><body>'
        '<p epub:type="x">le <b>chat</b> noir</p></body></html>'
    )
    out = translate_formatted(translator, page, "xhtml", options=translator.options.replace(beam=1))
    assert '<p epub:type="x">the black <b>cat</b></p>' in out and xml_names(out.encode()) == xml_names(page.encode())
    odf = "urn:oasis:names:tc:opendocument:xmlns"
    content = (
        f'<office:document-content xmlns:office="{odf}:office:1.0" xmlns:text="{odf}:text:1.0"><office:body>'
        '<office:text><text:p>le <text:span text:style-name="T1">chien</text:span> blanc</text:p></office:text>'
        "</office:body></office:document-content>"
    )
    odt = io.BytesIO()
    with zipfile.ZipFile(odt, "w") as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        z.writestr("content.xml", content)
    written = zipfile.ZipFile(io.BytesIO(translate_formatted(translator, odt.getvalue(), "odt"))).read("content.xml")
    assert b'<text:p>the white <text:span text:style-name="T1">dog</text:span></text:p>' in written
    assert xml_names(written) == xml_names(content.encode())

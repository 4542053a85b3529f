"""The technical corpora read from their published forms: gettext catalogues, help pages joined
by their paragraph ids, numbered cheatsheets; split by page, extracted once."""

import io
import lzma
import tarfile

import pytest

from mt.data import technical
from mt.errors import UserError

PO = """msgid ""
msgstr "Content-Type: text/plain; charset=UTF-8\\n"

#: ../Doc/library/functions.rst:10
msgid "Call :func:`print` with ``end=''`` and see :ref:`the tutorial <tut-io>`."
msgstr "Appelez :func:`print` avec ``end=''`` et lisez :ref:`le tutoriel <tut-io>`."

msgid "Not translated yet."
msgstr ""

#, fuzzy
msgid "A doubtful one."
msgstr "Une douteuse."

msgid "One file"
msgid_plural "%d files"
msgstr[0] "Un fichier"
msgstr[1] "%d fichiers"

#~ msgid "Gone."
#~ msgstr "Parti."

msgid "Use :meth:`~str.join` on *many* strings."
msgstr "Utilisez :meth:`~str.join` sur *plusieurs* chaînes."
"""


def tar_gz(path, members: dict[str, str]):
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def deb(path, pages: dict[str, str]):
    """A Debian package as ar writes it: debian-binary, control.tar.xz, data.tar.xz (the pages)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, text in pages.items():
            data = text.encode()
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", b"x"), ("data.tar.xz", lzma.compress(buffer.getvalue()))]
    with open(path, "wb") as f:
        f.write(b"!<arch>\n")
        for name, data in members:
            f.write(f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode())
            f.write(data + b"\n" * (len(data) % 2))
    return path


def test_a_gettext_catalogue_gives_its_translated_entries_cleaned(tmp_path):
    archive = tar_gz(tmp_path / "docs.tar.gz", {"docs-fr/library/functions.po": PO, "docs-fr/README.rst": "x"})
    pairs = list(technical.gettext_pairs(archive, r"\.po$"))
    assert [(en, fr) for _, en, fr in pairs] == [
        ("Call print with end='' and see the tutorial.", "Appelez print avec end='' et lisez le tutoriel."),
        ("Use join on many strings.", "Utilisez join sur plusieurs chaînes."),
    ]
    assert pairs[0][0] == "../Doc/library/functions.rst"  # the page: the document the entry came from
    assert pairs[1][0] == "docs-fr/library/functions.po#0"  # none named: a run of the catalogue's entries


def test_help_pages_are_joined_by_page_and_paragraph_id(tmp_path):
    page = '<html><body><h1 id="hd_id1">{}</h1><p id="par_id2" class="x">{} <span>{}</span></p><p>{}</p></body></html>'
    english = deb(tmp_path / "en.deb", {
        "usr/share/libreoffice/help/en-US/text/scalc/01/sum.html": page.format("Sum", "Adds", "numbers.", "skip"),
        "usr/share/libreoffice/help/en-US/text/only/english.html": page.format("A", "B", "C", "D"),
    })  # fmt: skip
    french = deb(tmp_path / "fr.deb", {
        "usr/share/libreoffice/help/fr/text/scalc/01/sum.html": page.format("Somme", "Additionne", "les nombres.", "x"),
    })  # fmt: skip
    pairs = sorted(technical.help_pairs(english, french))
    assert pairs == [("scalc/01/sum.html", "Adds numbers.", "Additionne les nombres."),
                     ("scalc/01/sum.html", "Sum", "Somme")]  # fmt: skip
    (tmp_path / "broken.deb").write_bytes(b"not a package")
    with pytest.raises(UserError, match="not a Debian package"):
        list(technical.help_pairs(tmp_path / "broken.deb", french))


def test_cheatsheets_are_joined_by_their_numbers(tmp_path):
    template = (
        "**Title** [[webpage]](x)\n\n**1. Neural Networks**\n\n&#10230;\n\n**2. Gradient *descent***\n\n&#10230;\n"
    )
    french = "**1. Neural Networks**\n\n&#10230; Réseau de neurones\n\n**2. Gradient descent**\n\n&#10230;\n\n"
    archive = tar_gz(tmp_path / "sheets.tar.gz", {"repo/template/dl.md": template, "repo/fr/dl.md": french})
    assert list(technical.cheatsheet_pairs(archive)) == [("dl.md", "Neural Networks", "Réseau de neurones")]


def test_splits_go_by_page_and_are_written_once(tmp_path):
    pages = [f"page{i}" for i in range(200)]
    splits = {technical.split_of(p) for p in pages}
    assert splits == {"train", "valid", "test"} and technical.split_of("page7") == technical.split_of("page7")
    pairs = [(p, f"{p} line {k}", f"{p} ligne {k}") for p in pages for k in range(3)] + [("page0", "same", "same")]
    counts = technical.write_splits(iter(pairs), tmp_path / "pairs")
    assert sum(counts.values()) == 600  # the untranslated pair left out
    seen = {}
    for split in technical.SPLITS:
        en = (tmp_path / "pairs" / f"{split}.en").read_text().splitlines()
        fr = (tmp_path / "pairs" / f"{split}.fr").read_text().splitlines()
        assert len(en) == len(fr) == counts[split]
        for line in en:
            seen.setdefault(line.split()[0], set()).add(split)
    assert all(len(s) == 1 for s in seen.values())  # no page in two splits


@pytest.mark.parametrize("corpus", ["pydocs_fr", "djangodocs_fr", "libreoffice_help", "ml_cheatsheets"])
def test_the_technical_corpora_load_from_the_mirror(mirror, corpus, capsys):
    from mt.data.corpora import load_pairs

    sizes = {split: len(load_pairs(corpus, split, "fr", "en")) for split in technical.SPLITS}
    assert sizes["train"] > 500 and sizes["valid"] > 50 and sizes["test"] > 50, sizes
    assert "pairs read from its published files" in capsys.readouterr().err
    again = load_pairs(corpus, "valid", "en", "fr")
    assert len(again) == sizes["valid"] and capsys.readouterr().err == ""  # extracted once


def test_a_stray_end_tag_or_a_void_element_does_not_cut_a_paragraph_short():
    parser = technical._IdTexts()
    parser.feed('<p id="par_id1">Click <img src="x.png"> OK</span>, then <b>Apply</b>.</p><p id="par_id2">Next</p>')
    assert parser.texts == {"par_id1": "Click OK, then Apply.", "par_id2": "Next"}

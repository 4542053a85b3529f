"""Corpus catalog: mirror copies are checksummed, and a failed fetch leaves nothing behind."""

import hashlib

import pytest

from mt.data import catalog
from mt.errors import UserError

CONTENT = b"some corpus text\n"


@pytest.fixture
def toy_catalog(monkeypatch, tmp_path):
    good = catalog.RemoteFile("toy.txt", "http://127.0.0.1:9/toy.txt", hashlib.sha256(CONTENT).hexdigest())
    monkeypatch.setitem(catalog.CORPORA, "toy", [good])
    mirror = tmp_path / "mirror"
    (mirror / "toy").mkdir(parents=True)
    monkeypatch.setenv("MT_DATA_MIRROR", str(mirror))
    return mirror


def test_mirror_copy_with_right_checksum(toy_catalog, isolated_data):
    (toy_catalog / "toy" / "toy.txt").write_bytes(CONTENT)
    folder = catalog.fetch("toy")
    assert folder == isolated_data / "toy"
    assert (folder / "toy.txt").read_bytes() == CONTENT


def test_wrong_checksum_is_rejected_and_nothing_remains(toy_catalog, isolated_data):
    (toy_catalog / "toy" / "toy.txt").write_bytes(b"tampered\n")
    with pytest.raises(UserError, match="sha256 .* does not match"):
        catalog.fetch("toy")
    assert list((isolated_data / "toy").iterdir()) == []


def test_empty_and_missing_mirror_files(toy_catalog, isolated_data):
    with pytest.raises(UserError, match="does not exist"):
        catalog.fetch("toy")
    (toy_catalog / "toy" / "toy.txt").write_bytes(b"")
    with pytest.raises(UserError, match="is empty"):
        catalog.fetch("toy")
    assert list((isolated_data / "toy").iterdir()) == []


def test_unreachable_source_says_what_to_do(toy_catalog, isolated_data, monkeypatch):
    monkeypatch.delenv("MT_DATA_MIRROR")
    with pytest.raises(UserError, match="cannot download http://127.0.0.1:9/toy.txt .*MT_DATA_MIRROR"):
        catalog.fetch("toy")
    assert list((isolated_data / "toy").iterdir()) == []


def test_unknown_corpus_suggests_a_name():
    with pytest.raises(UserError, match="did you mean 'multi30k'"):
        catalog.fetch("multi30")


def test_real_mirror_matches_published_checksum(mirror):
    path = catalog.corpus_file("tinyshakespeare", "input.txt")
    assert len(path.read_text(encoding="utf-8")) == 1_115_394


def _tar(path, members: dict[str, bytes]):
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def test_downloads_join_glob_members_in_name_order_and_read_sgml(monkeypatch, tmp_path, isolated_data):
    """The hansard and newsdiscusstest2015 fetch paths, from file:// archives built here."""
    import gzip

    monkeypatch.delenv("MT_DATA_MIRROR", raising=False)
    sessions = {f"hansard.36/s.{n:03d}.e.gz": gzip.compress(f"line {n}\n".encode()) for n in (2, 1, 10)}
    sessions["hansard.36/s.001.f.gz"] = gzip.compress(b"ligne\n")
    _tar(tmp_path / "h.tar", sessions)
    sgml = b'<srcset>\n<doc docid="1">\n<seg id="1"> Hello &amp; bye </seg>\n<seg id="2">Second</seg>\n</doc>\n'
    _tar(tmp_path / "t.tgz", {"test/x.en.sgm": sgml})
    monkeypatch.setitem(
        catalog.CORPORA,
        "toy",
        [
            catalog.RemoteFile("part.en.gz", (tmp_path / "h.tar").as_uri(), None, member="*.e.gz"),
            catalog.RemoteFile("x.en", (tmp_path / "t.tgz").as_uri(), None, member="test/x.en.sgm", sgml=True),
        ],
    )
    joined = gzip.decompress(catalog.corpus_file("toy", "part.en.gz").read_bytes())
    assert joined == b"line 1\nline 2\nline 10\n"  # every English session, in name order, none French
    assert catalog.corpus_file("toy", "x.en").read_bytes() == b"Hello &amp; bye\nSecond\n"


def test_the_catalog_names_the_hansard_and_newsdiscusstest_sources():
    hansard = {rf.name: rf for rf in catalog.files("hansard")}
    assert len(hansard) == 8 and hansard["house.training.fr.gz"].url.startswith("https://www.isi.edu/")
    assert hansard["senate.testing.en.gz"].member == "*.e.gz"
    news = {rf.name: rf for rf in catalog.files("newstest")}
    assert (
        news["newsdiscusstest2015.fr"].url == "https://www.statmt.org/wmt15/test.tgz"
        and news["newsdiscusstest2015.fr"].sgml
    )

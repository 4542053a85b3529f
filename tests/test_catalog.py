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

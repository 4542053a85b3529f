import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_MIRROR = REPO.parent / "shared" / "data"


@pytest.fixture(autouse=True)
def isolated_data(tmp_path, monkeypatch):
    """Every test gets its own data folder, so nothing leaks into the repository's data/."""
    monkeypatch.setenv("MT_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


@pytest.fixture
def mirror(monkeypatch):
    """The offline corpus mirror (MT_DATA_MIRROR, else ../shared/data); skipped, saying why, without it."""
    path = Path(os.environ.get("MT_DATA_MIRROR") or SHARED_MIRROR)
    if not (path / "tinyshakespeare").is_dir():
        pytest.skip(f"no corpus mirror at {path}: set MT_DATA_MIRROR to a folder laid out like ../shared/data")
    monkeypatch.setenv("MT_DATA_MIRROR", str(path))
    return path


@pytest.fixture
def toy_text_corpus(isolated_data, monkeypatch):
    """A small text placed where the catalog keeps tinyshakespeare, so LM runs need no mirror."""
    monkeypatch.delenv("MT_DATA_MIRROR", raising=False)
    folder = isolated_data / "tinyshakespeare"
    folder.mkdir(parents=True)
    line = "First Citizen: we are accounted poor citizens, the patricians good.\n"
    (folder / "input.txt").write_text(line * 60)
    return folder / "input.txt"

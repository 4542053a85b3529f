import os
import shutil
import tempfile
from pathlib import Path

import pytest
from helpers import TINY_MODEL, share_the_cores_among_workers, synthetic_corpus

from mt import train as train_module

REPO = Path(__file__).resolve().parents[1]
SHARED_MIRROR = REPO.parent / "shared" / "data"


share_the_cores_among_workers()


@pytest.fixture(autouse=True)
def isolated_data(tmp_path, monkeypatch):
    """Every test gets its own data folder, so nothing leaks into the repository's data/."""
    monkeypatch.setenv("MT_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


@pytest.fixture(autouse=True)
def own_temporary_folder(monkeypatch):
    """The commands a test starts keep their temporary files in a folder of the test's own, removed
    after it: torchrun's agent alone left a log folder in /tmp per launch, a dozen a run of the suite.
    A short path under the system's, since Chromium puts sockets there (108 characters at most)."""
    folder = Path(tempfile.mkdtemp(prefix="mt-test-"))
    monkeypatch.setenv("TMPDIR", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


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


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("translate")
    spec = synthetic_corpus(tmp, 400)
    mp = pytest.MonkeyPatch()
    mp.setenv("MT_DATA_DIR", str(tmp / "data"))
    train_module.main(
        [
            "recipes/multi30k.yaml",
            *TINY_MODEL,
            f"data.train=[{spec}]",
            f"data.valid={spec}",
            f"data.test={spec}",
            "train.max_steps=200",  # enough to translate its own test set near perfectly (chrF > 90 below)
            "train.eval_every=200",
            f"out_dir={tmp / 'run'}",
        ]
    )
    mp.undo()
    return tmp / "run"

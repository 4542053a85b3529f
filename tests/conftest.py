import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from mt import train as train_module

REPO = Path(__file__).resolve().parents[1]
SHARED_MIRROR = REPO.parent / "shared" / "data"


def available_cores() -> int:
    """The cores this process may run on (its affinity where the OS tells it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def share_the_cores_among_workers() -> None:
    """Under pytest-xdist (`-n auto`), give each worker its share of the cores. Workers that each
    start a thread per core oversubscribe them: with two workers of two threads on two cores the suite
    ran slower than in one process, with one thread each 1.7x faster. The commands that tests start
    inherit the share through OMP_NUM_THREADS."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        threads = max(1, available_cores() // workers)
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)


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


# A tiny translation model trained once per test session on a synthetic corpus ("le chat noir" ->
# "the black cat"): what the decoding, scoring, export and server tests run on.
WORDS = {"chat": "cat", "chien": "dog", "homme": "man", "femme": "woman", "enfant": "child"}
COLOURS = {"noir": "black", "blanc": "white", "rouge": "red", "petit": "small"}
TINY_MODEL = [
    "model.enc_layers=1",
    "model.dec_layers=1",
    "model.d_model=32",
    "model.n_head=2",
    "model.d_ff=64",
    "model.dropout=0.0",
    "tokenizer.vocab_size=39",
    "data.max_tokens=512",
    "train.device=cpu",
    "train.warmup_steps=5",
    "train.lr=3e-3",
]


def synthetic_corpus(folder, n):
    rng = random.Random(0)
    fr, en = [], []
    for _ in range(n):
        noun, colour = rng.choice(list(WORDS)), rng.choice(list(COLOURS))
        fr.append(f"le {noun} {colour}")
        en.append(f"the {COLOURS[colour]} {WORDS[noun]}")
    (folder / "c.fr").write_text("\n".join(fr) + "\n")
    (folder / "c.en").write_text("\n".join(en) + "\n")
    return f"{{path: text, data_files: {{fr: {folder / 'c.fr'}, en: {folder / 'c.en'}}}}}"


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("translate")
    spec = synthetic_corpus(tmp, 400)
    mp = pytest.MonkeyPatch()
    mp.setenv("MT_DATA_DIR", str(tmp / "data"))
    train_module.main(
        [
            "recipes/fr_en.yaml",
            *TINY_MODEL,
            f"data.train=[{spec}]",
            f"data.valid={spec}",
            f"data.test={spec}",
            "train.max_steps=300",
            "train.eval_every=300",
            f"out_dir={tmp / 'run'}",
        ]
    )
    mp.undo()
    return tmp / "run"


def cli(command, *args, stdin=None, env=None):
    """Run `python -m command args` as a user would; returns the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", command, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


def process_children() -> dict[int, list[int]]:
    """Every running process's children, by parent pid (Linux /proc); one that ends meanwhile is skipped."""
    found: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            found.setdefault(parent, []).append(int(entry.name))
    return found


def children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (Linux /proc)."""
    return process_children().get(pid, [])


def running(pid: int) -> bool:
    """Alive and not a zombie (one that init has not yet reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

"""Plain helpers the tests share (fixtures live in conftest.py): the commands as a user runs them,
the tiny corpora and models, the processes a command leaves, and the training runs the plan tests
repeat. No test file imports another; they all take what they share from here."""

import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


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
    "data.held_out=false",  # a toy task scores the very sentences it learns from
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


# A tiny char GPT on the toy corpus (the `toy_text_corpus` fixture): what the training tests run.
LM_RECIPE = "recipes/shakespeare_char.yaml"
TINY_LM = [
    "model.n_layer=1",
    "model.n_head=2",
    "model.d_model=16",
    "model.dropout=0.1",
    "data.block_size=16",
    "train.batch_size=4",
    "train.max_steps=12",
    "train.eval_every=4",
    "train.eval_batches=2",
    "train.warmup_steps=2",
    "train.device=cpu",
    "train.log_every=1",
    "train.max_minutes=null",  # a time budget makes the schedule follow the clock; these tests compare runs exactly
]


def run_train(out_dir, *extra):
    from mt import train as train_module

    train_module.main([LM_RECIPE, *TINY_LM, f"out_dir={out_dir}", *extra])


def interrupt_after(monkeypatch, n_batches, task_class=None):
    """Deliver a real SIGINT while the training loop fetches batch n_batches + 1."""
    from mt.training.lm_task import LanguageModelTask

    task_class = task_class or LanguageModelTask
    original = task_class.train_batches

    def batches(self):
        for i, batch in enumerate(original(self)):
            if i == n_batches:
                os.kill(os.getpid(), signal.SIGINT)
            yield batch

    monkeypatch.setattr(task_class, "train_batches", batches)


class TickingClock:
    """A stand-in for the trainer's clock that moves `tick` seconds each time it is read, so that a
    time budget plans the same steps on a fast machine and on a loaded one."""

    def __init__(self, tick: float):
        self.now, self.tick = 0.0, tick

    def monotonic(self) -> float:
        self.now += self.tick
        return self.now


def run_budgeted(run_dir, budget: list[str], monkeypatch) -> dict:
    """A run whose time budget follows a clock that ticks with each reading; its last.pt."""
    from mt.checkpoint import load_checkpoint
    from mt.training import trainer

    monkeypatch.setattr(trainer, "time", TickingClock(0.01))
    run_train(run_dir, *budget)
    return load_checkpoint(run_dir / "last.pt")


def interrupt_and_resume(run_dir, budget: list[str], monkeypatch, after_batches: int, seen: list) -> tuple[dict, dict]:
    """A budgeted run stopped by Ctrl-C after `after_batches` batches, then resumed to its end: its
    last.pt at the stop and at the end. `seen`, what a test watches at each step, is emptied before
    the resume."""
    from mt.checkpoint import load_checkpoint
    from mt.training import trainer

    monkeypatch.setattr(trainer, "time", TickingClock(0.01))
    with monkeypatch.context() as m:
        interrupt_after(m, after_batches)
        with pytest.raises(SystemExit):
            run_train(run_dir, *budget)
    interrupted = load_checkpoint(run_dir / "last.pt")
    seen.clear()
    run_train(run_dir, *budget, "--resume")
    return interrupted, load_checkpoint(run_dir / "last.pt")


def assert_same_weights(a: dict, b: dict) -> None:
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


class Upper:
    """A stand-in translator for the format tests: it "translates" a sentence by upper-casing it,
    word for word (so markup placed by position lands on the same words), and records what reached
    it, so that what goes through the model and where the markup comes back can be read."""

    max_src_tokens = 100

    def __init__(self, tgt_lang: str = "en"):
        from types import SimpleNamespace

        self.cfg = SimpleNamespace(data=SimpleNamespace(src_lang="fr", tgt_lang=tgt_lang))
        tokens = re.compile(r"\w+|[^\w\s]").findall  # words and punctuation marks, as subword models split them
        self.tokenizer = SimpleNamespace(encode=tokens, split=lambda texts, side="src": [tokens(t) for t in texts])
        self.options = None
        self.seen: list[str] = []
        self.notes: set[str] = set()

    def note_once(self, note: str) -> None:  # as an engine with no attention to align by says it
        self.notes.add(note)

    def translate(self, sentences, options=None, batch_size=64, hypotheses=False, **changes):
        from mt.inference.search import Hypothesis

        self.seen += sentences
        found = [[Hypothesis(s.upper(), 0.0, [], self.tokenizer.split([s.upper()])[0])] for s in sentences]
        return found if hypotheses else [h[0].text for h in found]


class _AttendingBack:
    """A stand-in model whose only layer's cross-attention looks from each output token at the
    source position it came from: what `Reverse` tells the alignment path through real weights.
    Source ids are vocabulary ids; an output id is 4 + the source position it was taken from."""

    SIZE = 128  # positions: above the stand-ins' max_src_tokens

    def __init__(self):
        from mt.model import Attention

        cross = Attention(self.SIZE, 1, 0.0, bias=False)
        with torch.no_grad():  # queries and keys as they come, sharp enough that one position wins
            cross.qkv.weight.zero_()
            cross.qkv.weight[: 2 * self.SIZE].copy_(torch.eye(self.SIZE).repeat(2, 1) * 8)
        self.decoder = [torch.nn.Module()]
        self.decoder[0].cross = cross

    def parameters(self):
        return self.decoder[0].cross.parameters()

    def encode(self, src):  # (B, S) -> one-hot positions (B, S, D), mask (B, 1, 1, S)
        b, s = src.shape
        return torch.eye(self.SIZE)[:s].expand(b, s, self.SIZE), (src != 0)[:, None, None, :]

    def decoder_states(self, tgt_in, memory, mask):  # the query of row t is the position output token t came from
        taken = torch.cat([tgt_in[:, 1:], torch.zeros_like(tgt_in[:, :1])], dim=1)
        x = torch.where((taken >= 4)[..., None], torch.eye(self.SIZE)[(taken - 4).clamp(min=0)], 0.0)
        self.decoder[0].cross(x, memory=memory, mask=mask)


class Reverse(Upper):
    """A stand-in translator that reverses each sentence's word order (its final punctuation kept
    last) and upper-cases it, and tells where each output word came from through a stand-in
    model's cross-attention: markup is then placed by the real alignment path, not by position."""

    def __init__(self, tgt_lang: str = "en"):
        super().__init__(tgt_lang)
        self.model = _AttendingBack()
        self.vocabulary: dict[str, int] = {}

    def encode(self, sentences, warn_truncated=True):
        return [[self.vocabulary.setdefault(t, len(self.vocabulary) + 4) for t in tokens] for tokens in
                self.tokenizer.split(sentences)]  # fmt: skip

    def pieces(self, ids):
        words = {i: t for t, i in self.vocabulary.items()}
        return [words[i] for i in ids]

    def translate(self, sentences, options=None, batch_size=64, hypotheses=False, **changes):
        from mt.inference.search import Hypothesis

        self.seen += sentences
        found = []
        for tokens in self.tokenizer.split(sentences):
            end = len(tokens)
            while end > 0 and re.fullmatch(r"[.!?…]", tokens[end - 1]):
                end -= 1
            order = list(range(end))[::-1] + list(range(end, len(tokens)))
            words = [tokens[i].upper() for i in order]
            text = " ".join(words[:end]) + "".join(words[end:])
            found.append([Hypothesis(text, 0.0, [4 + i for i in order], words)])
        return found if hypotheses else [h[0].text for h in found]


def xml_names(data: bytes):
    """An XML document's element and attribute names with their namespaces (how many of each), and
    every (prefix, namespace) its elements have in scope: what a translation must keep. Read as the
    library reads them (mt/formats/xmltree.py's `names`), which its own tests pin down."""
    from lxml import etree

    from mt.formats.archives import XML
    from mt.formats.xmltree import names

    return names(etree.fromstring(data, XML))

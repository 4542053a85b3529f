"""Tokenizers with one interface (encode, decode, vocab_size, save/load, the special ids of
mt/data/vocab.py), and their training for either task, SentencePiece models cached by the content
they learned from. The character tokenizer numbers its characters from 4, in sorted order.
Encoding takes a `side` ("src" or "tgt"): mt's own tokenizers are joint and ignore it; an imported
Marian model's has one SentencePiece model per language (mt/data/marian_tokenizer.py).
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import sentencepiece as spm

from mt.data.marian_tokenizer import MarianVocabTokenizer
from mt.data.vocab import END, META_FILE, PAD, SPECIALS, START, UNK, clean
from mt.errors import UserError
from mt.files import atomic_write

SPM_FILE = "tokenizer.model"


def _vocab_size_hint(message: str) -> str:
    """Which way to move tokenizer.vocab_size, where SentencePiece's refusal says."""
    if "required_chars" in message:  # fewer pieces than the text has distinct characters
        return " (try a larger tokenizer.vocab_size)"
    if "too high" in message:  # more pieces than the text can give
        return " (try a smaller tokenizer.vocab_size)"
    return ""


class CharTokenizer:
    """One token per character of the training text."""

    kind = "char"

    def __init__(self, chars: Iterable[str]):
        self.chars = sorted(set(chars))
        self.stoi = {c: i + len(SPECIALS) for i, c in enumerate(self.chars)}

    @classmethod
    def train(cls, texts: Iterable[str]) -> CharTokenizer:
        seen: set[str] = set()
        for t in texts:
            seen.update(t)
        return cls(seen)

    @property
    def vocab_size(self) -> int:
        return len(SPECIALS) + len(self.chars)

    def unknown_chars(self, text: str) -> list[str]:
        return sorted(set(text) - self.stoi.keys())

    def encode(self, text: str, side: str = "src") -> list[int]:
        stoi = self.stoi
        return [stoi.get(c, UNK) for c in clean(text)]

    def encode_batch(self, texts: list[str], side: str = "src") -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        n, chars = len(SPECIALS), self.chars
        return "".join(chars[i - n] for i in ids if i >= n)

    def fingerprint(self) -> str:
        return hashlib.sha256("".join(self.chars).encode()).hexdigest()

    def save(self, directory: Path) -> None:
        (Path(directory) / META_FILE).write_text(json.dumps({"kind": self.kind, "chars": "".join(self.chars)}))


class SentencePieceTokenizer:
    """A SentencePiece model (unigram or BPE) trained through the Python API."""

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes):
        self.model_proto = model_proto
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
        self._piece_scores: np.ndarray | None = None  # unigram log-probabilities, for sampling

    @classmethod
    def train(
        cls, texts: Iterable[str], vocab_size: int, model_type: str = "unigram", max_sentences: int = 2_000_000
    ) -> SentencePieceTokenizer:
        buffer = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(texts),
                model_writer=buffer,
                vocab_size=vocab_size,
                model_type=model_type,
                character_coverage=1.0,  # keep every character of French and English (œ, ’, «)
                pad_id=PAD,
                unk_id=UNK,
                bos_id=START,
                eos_id=END,
                pad_piece=SPECIALS[PAD],
                unk_piece=SPECIALS[UNK],
                bos_piece=SPECIALS[START],
                eos_piece=SPECIALS[END],
                input_sentence_size=max_sentences,
                shuffle_input_sentence=True,
                num_threads=4,
                minloglevel=2,
            )
        except RuntimeError as e:
            raise UserError(f"SentencePiece training failed: {e}{_vocab_size_hint(str(e))}") from None
        return cls(buffer.getvalue())

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str, side: str = "src") -> list[int]:
        return self.sp.encode(clean(text))

    def encode_batch(self, texts: list[str], side: str = "src") -> list[list[int]]:
        return self.sp.encode([clean(t) for t in texts])

    def vocabulary(self) -> list[str]:
        return [self.sp.id_to_piece(i) for i in range(self.vocab_size)]

    def split(self, texts: list[str], side: str = "src") -> list[list[str]]:
        return self.sp.encode([clean(t) for t in texts], out_type=str)

    def join(self, pieces: Iterable[str]) -> str:
        return self.sp.decode_pieces(list(pieces))

    def piece_id(self, piece: str) -> int:
        return self.sp.piece_to_id(piece)

    def id_to_piece(self, i: int) -> str:
        return self.sp.id_to_piece(i)

    def sample_encode_batch(
        self, texts: list[str], alpha: float, rng: np.random.Generator, nbest: int = 16
    ) -> list[list[int]]:
        """Subword regularization by l-best sampling (Kudo, 2018): one of each text's `nbest` best
        unigram segmentations, drawn with probability proportional to P(segmentation) ** alpha from
        `rng`. SentencePiece's own sampling draws from a generator that no seed makes repeatable
        from one process to the next; this one resumes exactly."""
        if self._piece_scores is None:
            self._piece_scores = np.array([self.sp.get_score(i) for i in range(self.vocab_size)])
        out = []
        for candidates in self.sp.nbest_encode_as_ids([clean(t) for t in texts], nbest_size=nbest):
            if len(candidates) <= 1:
                out.append(candidates[0] if candidates else [])
                continue
            logp = alpha * np.array([self._piece_scores[c].sum() for c in candidates])
            p = np.exp(logp - logp.max())
            out.append(candidates[rng.choice(len(candidates), p=p / p.sum())])
        return out

    def decode(self, ids: Iterable[int]) -> str:
        return self.sp.decode([i for i in ids if i > END])

    def fingerprint(self) -> str:
        return hashlib.sha256(self.model_proto).hexdigest()

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        (directory / SPM_FILE).write_bytes(self.model_proto)
        (directory / META_FILE).write_text(json.dumps({"kind": self.kind}))


Tokenizer = CharTokenizer | SentencePieceTokenizer  # or MarianVocabTokenizer, same calls


def load_tokenizer(directory: str | Path) -> Tokenizer:
    directory = Path(directory)
    meta_path = directory / META_FILE
    if not meta_path.is_file():
        raise UserError(f"{directory} holds no {META_FILE}; is it a run directory made by mt.train?")
    meta = json.loads(meta_path.read_text())
    if meta["kind"] == "char":
        return CharTokenizer(meta["chars"])
    if meta["kind"] == "marian":
        return MarianVocabTokenizer.load(directory, meta)
    return SentencePieceTokenizer((directory / SPM_FILE).read_bytes())


def learn_tokenizer(
    settings,
    sample: Callable[[int], Iterable[str]],
    size: int,
    content_key: str,
    seed: int,
    cache_dir: Path,
    source: str,
    unit: str = "pairs",
) -> Tokenizer:
    """The tokenizer `settings` (the recipe's tokenizer section) describe, for a corpus of `size`
    units (pairs, lines) that `sample(n)` yields the texts of n of. char: every character of all
    of them (a rare one left out would be <unk>). SentencePiece: learned from `tokenizer.max_pairs`
    of them, cached in `cache_dir` by `content_key` and the settings, so a second run on the same
    data does not retrain. `source` and `unit` name the data in messages."""
    t = settings
    if t.kind == "marian":
        raise UserError(
            f"tokenizer.kind 'marian' comes with an imported model (python -m mt.import marian); "
            f"fine-tune one with train.init_from=RUN_DIR instead of training a tokenizer on {source}"
        )
    if t.kind == "char":
        return CharTokenizer.train(sample(size))
    drawn = f"|{t.max_pairs}|{seed}" if size > t.max_pairs else ""
    key = hashlib.sha256(f"{content_key}|{t.vocab_size}|{t.model_type}{drawn}".encode()).hexdigest()[:20]
    cached = Path(cache_dir) / f"spm-{key}.model"
    if cached.is_file():
        return SentencePieceTokenizer(cached.read_bytes())
    print(
        f"training a {t.vocab_size}-piece {t.model_type} SentencePiece model on {min(size, t.max_pairs):,} "
        f"{unit} (cached for later runs)...",
        file=sys.stderr,
        end="",
        flush=True,
    )
    start, with_text = time.monotonic(), 0

    def texts():
        nonlocal with_text
        for text in sample(t.max_pairs):
            with_text += bool(text.strip())
            yield text

    try:
        tokenizer = SentencePieceTokenizer.train(texts(), t.vocab_size, t.model_type, max_sentences=2 * t.max_pairs)
    except UserError:
        if with_text == 0:
            raise UserError(
                f"{source}: {size:,} {unit} read, but every line is empty; no usable text remains"
            ) from None
        raise
    print(f" {time.monotonic() - start:.0f} s", file=sys.stderr)
    cached.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(cached, lambda tmp: Path(tmp).write_bytes(tokenizer.model_proto))
    return tokenizer

"""A language model's data, read once: one plain text (a catalog corpus or a UTF-8 file), its
tokenizer (a run's own, another run's, or learned from the text) and its ids."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import NamedTuple

import torch

from mt.data import catalog
from mt.data.tokenizer import Tokenizer, learn_tokenizer, load_tokenizer
from mt.errors import UserError

TEXT_FILES = {"tinyshakespeare": "input.txt"}


class PlainText(NamedTuple):
    tokenizer: Tokenizer
    ids: torch.Tensor  # the whole text, encoded


def read_corpus_text(corpus: str) -> str:
    """The text of a catalog corpus (`tinyshakespeare`) or of a UTF-8 file at the path `corpus`."""
    if corpus in TEXT_FILES:
        path = catalog.corpus_file(corpus, TEXT_FILES[corpus])
    elif Path(corpus).is_file():
        path = Path(corpus)
    else:
        raise UserError(
            f"data.corpus '{corpus}' is neither a catalog text ({', '.join(TEXT_FILES)}) nor an existing file"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        line = path.read_bytes()[: e.start].count(b"\n") + 1
        raise UserError(f"{path} line {line}: invalid UTF-8 ({e.reason}); fix or re-encode the file") from None
    if not text.strip():
        raise UserError(f"{path} holds no text to learn from")
    return text


def split_text(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoded corpus as (train, validation): its first 90% and the rest."""
    n_train = int(0.9 * len(ids))
    return ids[:n_train], ids[n_train:]


def prepare_text(corpus: str, tokenizer_settings, seed: int, tokenizer_from: Path | None) -> PlainText:
    """The text of `corpus` encoded with the tokenizer of the run directory `tokenizer_from`, or
    with one learned from the text itself (char: all of it; SentencePiece: its first lines)."""
    text = read_corpus_text(corpus)
    if tokenizer_from is not None:
        tokenizer = load_tokenizer(tokenizer_from)
    else:
        lines = [line for line in text.splitlines() if line.strip()]
        sample = (lambda n: [text]) if tokenizer_settings.kind == "char" else (lambda n: lines[:n])  # noqa: E731
        content = hashlib.sha256(text.encode()).hexdigest()
        tokenizer = learn_tokenizer(
            tokenizer_settings, sample, len(lines), content, seed, catalog.data_dir() / "cache", "data.corpus"
        )
    return PlainText(tokenizer, torch.tensor(tokenizer.encode(text), dtype=torch.long))

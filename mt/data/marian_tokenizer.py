"""The tokenizer of an imported Marian (OPUS-MT) model: two SentencePiece models, one per language,
whose pieces map through one shared vocabulary.

Contract, and where it differs from mt's own tokenizers:
- Ids keep mt's specials: <pad> 0, <unk> 1, <START> 2, <END> 3. Marian's vocabulary has no
  start symbol: its decoder starts from <pad>, and its </s> ends source and target. On import,
  Marian's </s> becomes <END>, its <unk> stays <unk>, its <pad> becomes <START> (the decoder's
  first input) and also mt's <pad> (padding, never read), and every other piece keeps its order
  from id 4 on. `marian_ids` gives the one-to-one map back, so ids compare with MarianTokenizer's.
- The source side is split by the source model and the target side by the target model
  (`side="tgt"`); ids go back to text through the target model. A piece one model makes that the
  vocabulary lacks is <unk>, as in MarianTokenizer.
- A leading language tag such as `>>fra<<` (multilingual OPUS-MT models) is one token, as in
  MarianTokenizer.
- Text goes to SentencePiece as it is (only lone surrogates become U+FFFD), and a literal </s>,
  <unk> or <pad> in it is that special token, both as in MarianTokenizer.
- Marian's tokenizers are never trained here; they come with the model (python -m mt.import).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from mt.data.vocab import END, META_FILE, SPECIALS, START, UNK, without_surrogates

SOURCE_SPM, TARGET_SPM = "source.spm", "target.spm"
MARIAN_SPECIALS = {"eos": "</s>", "unk": "<unk>", "pad": "<pad>"}
# A special token written out in the text is that token, as MarianTokenizer splits it out
LITERAL_SPECIALS = {"</s>": SPECIALS[END], "<unk>": SPECIALS[UNK], "<pad>": SPECIALS[START]}
_LITERAL = re.compile("(" + "|".join(map(re.escape, LITERAL_SPECIALS)) + ")")


class MarianVocabTokenizer:
    kind = "marian"

    def __init__(self, source_proto: bytes, target_proto: bytes, pieces: list[str]):
        self.source_proto, self.target_proto, self.pieces_by_id = source_proto, target_proto, list(pieces)
        self.models = {
            "src": spm.SentencePieceProcessor(model_proto=source_proto),
            "tgt": spm.SentencePieceProcessor(model_proto=target_proto),
        }
        self.ids = {piece: i for i, piece in enumerate(self.pieces_by_id)}

    @classmethod
    def from_marian(cls, source_proto: bytes, target_proto: bytes, vocab: dict[str, int]) -> MarianVocabTokenizer:
        """From Marian's vocab.json ({piece: id}): the ids renumbered as the contract above says."""
        order = sorted(vocab, key=vocab.__getitem__)
        rest = [p for p in order if p not in MARIAN_SPECIALS.values()]
        return cls(source_proto, target_proto, SPECIALS + rest)

    def marian_ids(self, vocab: dict[str, int]) -> list[int]:
        """For each of our ids, the Marian id it stands for (both <pad> and <START> are Marian's <pad>)."""
        specials = [MARIAN_SPECIALS["pad"], MARIAN_SPECIALS["unk"], MARIAN_SPECIALS["pad"], MARIAN_SPECIALS["eos"]]
        return [vocab[p] for p in specials] + [vocab[p] for p in self.pieces_by_id[len(SPECIALS) :]]

    @property
    def vocab_size(self) -> int:
        return len(self.pieces_by_id)

    def vocabulary(self) -> list[str]:
        return list(self.pieces_by_id)

    def split(self, texts: list[str], side: str = "src") -> list[list[str]]:
        """Each text as pieces of the `side` model: literal special tokens split out first, then
        each stretch between them with a leading language tag kept whole."""
        return [self._pieces(without_surrogates(text), self.models[side]) for text in texts]

    @staticmethod
    def _pieces(text: str, model: spm.SentencePieceProcessor) -> list[str]:
        pieces = []
        for part in _LITERAL.split(text):
            if part in LITERAL_SPECIALS:
                pieces.append(LITERAL_SPECIALS[part])
            elif part:
                if part.startswith(">>") and (end := part.find("<<")) != -1:
                    pieces.append(part[: end + 2])
                    part = part[end + 2 :]
                pieces += model.encode(part, out_type=str)
        return pieces

    def join(self, pieces: Iterable[str]) -> str:
        # SentencePiece leaves a piece its model lacks as it is, word-boundary marks included
        return self.models["tgt"].decode_pieces(list(pieces)).replace("\u2581", " ").strip()

    def piece_id(self, piece: str) -> int:
        return self.ids.get(piece, UNK)

    def id_to_piece(self, i: int) -> str:
        return self.pieces_by_id[i]

    def encode(self, text: str, side: str = "src") -> list[int]:
        return self.encode_batch([text], side)[0]

    def encode_batch(self, texts: list[str], side: str = "src") -> list[list[int]]:
        ids = self.ids
        return [[ids.get(p, UNK) for p in pieces] for pieces in self.split(texts, side)]

    def decode(self, ids: Iterable[int]) -> str:
        return self.join(self.pieces_by_id[i] for i in ids if i > END)

    def fingerprint(self) -> str:
        h = hashlib.sha256(self.source_proto + self.target_proto)
        h.update("\n".join(self.pieces_by_id).encode())
        return h.hexdigest()

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        (directory / SOURCE_SPM).write_bytes(self.source_proto)
        (directory / TARGET_SPM).write_bytes(self.target_proto)
        (directory / META_FILE).write_text(json.dumps({"kind": self.kind, "pieces": self.pieces_by_id}))

    @classmethod
    def load(cls, directory: Path, meta: dict) -> MarianVocabTokenizer:
        directory = Path(directory)
        return cls((directory / SOURCE_SPM).read_bytes(), (directory / TARGET_SPM).read_bytes(), meta["pieces"])

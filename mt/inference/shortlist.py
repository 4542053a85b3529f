"""A lexical shortlist: for each source subword, the target subwords it can produce, so that CPU
decoding computes the output layer over those alone (mt/inference/search.py's `Decoder`).

Learned from parallel pairs, encoded with the run's tokenizer, by sentence co-occurrence: each
source id keeps its `per_source` targets of highest Dice score, 2 c(s, t) / (c(s) + c(t)), where
c counts the sentences holding a subword (raw co-occurrence counts would rank "the" and "," first
for every source; Dice ranks the targets whose sentences are the source's own). The `frequent`
most common target ids and the specials are always allowed. Saved in the run directory as plain
tensors, loaded with `weights_only=True`: a crafted file cannot run code.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mt.data.vocab import END, SPECIALS
from mt.errors import UserError
from mt.files import atomic_write

SHORTLIST_FILE = "shortlist.pt"
FORMAT = "mt-shortlist-1"
PER_SOURCE, FREQUENT = 20, 100  # targets a source piece brings, and pieces always allowed (bench/shortlist.py)
PAIR_CHUNK = 4_000_000  # sentence co-occurrence pairs counted at a time (memory: ~100 MB of keys)
MERGE_EVERY = 8  # chunks of counts summed into one, so that memory holds the distinct pairs and a few chunks


@dataclass(frozen=True)
class Shortlist:
    """Which target ids each source id may bring into a sentence's output layer."""

    table: torch.Tensor  # (Vs, K) int64: each source id's targets, best first, padded with <END>
    frequent: torch.Tensor  # (N,) int64: the most frequent target ids, always allowed
    target_vocab: int  # V, the output layer's size
    fingerprint: str  # the tokenizer it was learned with

    def allowed(self, src: torch.Tensor) -> torch.Tensor:
        """(B, S) padded source ids -> (A,) the sorted target ids a batch's outputs may hold: its
        source ids' targets, the frequent ids and the specials (first, in their own places). One
        set for the whole batch, as Marian and CTranslate2 take it (a sentence's own targets alone
        would leave out more of the pieces its unrestricted output holds)."""
        src = src.clamp(max=self.table.size(0) - 1)  # an id past the learned table: an unknown piece
        found = torch.zeros(self.target_vocab, dtype=torch.bool, device=src.device)
        found[: len(SPECIALS)] = True
        found[self.frequent.to(src.device)] = True
        found[self.table.to(src.device)[src.unique()].view(-1)] = True
        return found.nonzero().squeeze(1)

    def union(self, other: Shortlist) -> Shortlist:
        """What either allows: an ensemble's shortlist, each of its models having learned its own."""
        rows = max(self.table.size(0), other.table.size(0))
        tables = [torch.cat([t, t.new_full((rows - t.size(0), t.size(1)), END)]) for t in (self.table, other.table)]
        frequent = torch.cat([self.frequent, other.frequent]).unique()
        return Shortlist(torch.cat(tables, dim=1), frequent, self.target_vocab, self.fingerprint)

    def save(self, run_dir: str | Path) -> Path:
        """Write it as run_dir/shortlist.pt (atomically) and return that path."""
        path = Path(run_dir) / SHORTLIST_FILE
        state = {
            "format": FORMAT,
            "table": self.table.to(torch.int32),
            "frequent": self.frequent.to(torch.int32),
            "target_vocab": self.target_vocab,
            "fingerprint": self.fingerprint,
        }
        atomic_write(path, lambda tmp: torch.save(state, tmp))
        return path


def run_shortlist(run_dirs: Sequence[str | Path], fingerprint: str, target_vocab: int) -> Shortlist | None:
    """The shortlist of a run directory (or of a checkpoint file's), or for an ensemble the union of
    its runs' shortlists; None where a run has none (a union with everything allows everything)."""
    paths = [(Path(d).parent if Path(d).is_file() else Path(d)) / SHORTLIST_FILE for d in run_dirs]
    if not all(path.is_file() for path in paths):
        return None
    return functools.reduce(Shortlist.union, (load_shortlist(path, fingerprint, target_vocab) for path in paths))


def load_shortlist(path: str | Path, fingerprint: str, target_vocab: int) -> Shortlist:
    """The shortlist saved at `path`, checked against the run's tokenizer `fingerprint` and output
    size; a damaged, crafted or foreign file is one line of error."""
    path = Path(path)
    redo = f"make it again with: python -m mt.shortlist {path.parent}"
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise UserError(f"{path} holds objects other than tensors; refusing to load it ({redo})") from None
    except (RuntimeError, EOFError, ValueError, OSError) as e:
        reason = str(e).splitlines()[0].split(". ")[0][:120]
        raise UserError(f"{path} is damaged or not a shortlist ({reason}); {redo}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise UserError(f"{path} is not a shortlist written by mt.shortlist; {redo}")
    table, frequent = state.get("table"), state.get("frequent")
    if not (isinstance(table, torch.Tensor) and table.dim() == 2 and isinstance(frequent, torch.Tensor)):
        raise UserError(f"{path} is not a shortlist written by mt.shortlist; {redo}")
    if state.get("fingerprint") != fingerprint or state.get("target_vocab") != target_vocab:
        raise UserError(f"{path} was learned for another tokenizer or model; {redo}")
    for name, ids in (("table", table), ("frequent", frequent)):
        if ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < target_vocab):
            raise UserError(f"{path}: its {name} holds ids outside the vocabulary of {target_vocab}; {redo}")
    return Shortlist(table.long(), frequent.long(), target_vocab, fingerprint)


def learn_shortlist(
    sources: Sequence[Sequence[int]],
    targets: Sequence[Sequence[int]],
    src_vocab: int,
    target_vocab: int,
    fingerprint: str,
    per_source: int = PER_SOURCE,
    frequent: int = FREQUENT,
    progress: Callable[[int], None] | None = None,
) -> Shortlist:
    """Learn a shortlist from encoded pairs (`sources[i]` translates as `targets[i]`, ids without
    specials or with them: they are always allowed anyway). `progress` is told how many pairs each
    chunk counted."""
    if len(sources) != len(targets):
        raise UserError(f"{len(sources)} sources but {len(targets)} targets")
    if not len(sources):
        raise UserError("a shortlist needs parallel pairs to learn from; none were given")
    src_types, src_sent = _types(sources, src_vocab)
    tgt_types, tgt_sent = _types(targets, target_vocab)
    keys, both = _cooccurrences(src_types, src_sent, tgt_types, tgt_sent, len(sources), target_vocab, progress)
    src_count = np.bincount(src_types, minlength=src_vocab)  # sentences holding each id
    tgt_count = np.bincount(tgt_types, minlength=target_vocab)
    s, t = keys // target_vocab, keys % target_vocab
    dice = 2.0 * both / (src_count[s] + tgt_count[t])
    table = _best_per_source(s, t, dice, src_vocab, per_source)
    common = _most_frequent(targets, target_vocab, frequent)
    return Shortlist(torch.from_numpy(table), torch.from_numpy(common), target_vocab, fingerprint)


def _most_frequent(sentences: Sequence[Sequence[int]], vocab: int, n: int) -> np.ndarray:
    """The `n` ids that occur most often in `sentences`, most frequent first."""
    flat = np.fromiter((i for x in sentences for i in x), np.int64)
    return np.argsort(-np.bincount(flat, minlength=vocab), kind="stable")[:n].copy()


def _types(sentences: Sequence[Sequence[int]], vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """Each sentence's distinct ids, as (ids, sentence index) flat arrays ordered by sentence."""
    lengths = np.fromiter((len(x) for x in sentences), np.int64, len(sentences))
    flat = np.fromiter((i for x in sentences for i in x), np.int64, int(lengths.sum()))
    if flat.size and (flat.min() < 0 or flat.max() >= vocab):
        raise UserError(f"token ids outside the vocabulary of {vocab}: was another tokenizer used?")
    sentence = np.repeat(np.arange(len(sentences), dtype=np.int64), lengths)
    distinct = np.unique(sentence * vocab + flat)  # sorted: by sentence, then id
    return distinct % vocab, distinct // vocab


def _cooccurrences(src_ids, src_sent, tgt_ids, tgt_sent, n: int, target_vocab: int, progress):
    """Every (source id, target id) pair that shares a sentence, as sorted keys s * V + t, and how
    many sentences each shares. Sentences are taken in chunks of about PAIR_CHUNK pairs."""
    src_len, tgt_len = np.bincount(src_sent, minlength=n), np.bincount(tgt_sent, minlength=n)
    src_start, tgt_start = np.cumsum(src_len) - src_len, np.cumsum(tgt_len) - tgt_len
    pairs = src_len * tgt_len
    cum = np.cumsum(pairs)
    cuts = np.searchsorted(cum, np.arange(PAIR_CHUNK, cum[-1], PAIR_CHUNK))
    bounds = np.unique(np.concatenate([[0], cuts, [n]]))
    counted: list[tuple[np.ndarray, np.ndarray]] = []
    for first, last in zip(bounds[:-1], bounds[1:]):
        rows = np.arange(first, last)
        sent = np.repeat(rows, pairs[rows])  # the sentence of each pair in this chunk
        local = np.arange(sent.size) - np.repeat(cum[rows] - pairs[rows] - cum[first] + pairs[first], pairs[rows])
        s = src_ids[src_start[sent] + local // tgt_len[sent]]
        t = tgt_ids[tgt_start[sent] + local % tgt_len[sent]]
        counted.append(np.unique(s * target_vocab + t, return_counts=True))
        if len(counted) == MERGE_EVERY:
            counted = [_merged(counted)]
        if progress:
            progress(int(last - first))
    return _merged(counted)


def _merged(counted: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Chunks' (sorted keys, counts) summed into one (sorted keys, counts)."""
    if len(counted) == 1:
        return counted[0]
    keys, where = np.unique(np.concatenate([k for k, _ in counted]), return_inverse=True)
    return keys, np.bincount(where, weights=np.concatenate([c for _, c in counted]), minlength=keys.size)


def _best_per_source(s: np.ndarray, t: np.ndarray, score: np.ndarray, src_vocab: int, k: int) -> np.ndarray:
    """(Vs, k): each source id's k targets of highest score, best first, padded with <END>."""
    order = np.lexsort((-score, s))  # by source, best first
    s, t = s[order], t[order]
    starts = np.searchsorted(s, np.arange(src_vocab))
    rank = np.arange(s.size) - starts[s]
    keep = rank < k
    table = np.full((src_vocab, k), END, dtype=np.int64)
    table[s[keep], rank[keep]] = t[keep]
    return table


def training_pairs(cfg, limit: int, corpora: list[str] | None = None, seed: int = 0, log=None):
    """Up to `limit` (source, target) text pairs to learn from: the catalog `corpora` named (cleaned),
    else the run's own training corpora (its config's `data` section, read as training reads them,
    with its draw and cleaning). A random draw where there are more."""
    from mt.data.corpora import columns, load_corpora  # datasets: only for this

    d = cfg.data
    if corpora:
        ds, _, _ = load_corpora(corpora, "train", d.src_lang, d.tgt_lang, True, False, log, limit, seed)
    elif d.train:
        draw = min(d.draw or limit, limit)
        ds, _, _ = load_corpora(d.train, "train", d.src_lang, d.tgt_lang, d.clean, d.dedup, log, draw, cfg.seed)
    else:
        raise UserError(
            f"{cfg.out_dir} names no training corpora (an imported model?): give --src FILE --tgt FILE or --corpus NAME"
        )
    return drawn(*columns(ds, "src", "tgt"), limit, seed)


def drawn(sources: list[str], targets: list[str], limit: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """At most `limit` of the pairs, drawn at random (seeded) where there are more, in their order."""
    if len(sources) != len(targets):
        raise UserError(f"{len(sources)} sources but {len(targets)} targets: the files must be line-aligned")
    if len(sources) <= limit:
        return sources, targets
    rows = np.sort(np.random.default_rng(seed).choice(len(sources), limit, replace=False))
    return [sources[i] for i in rows], [targets[i] for i in rows]

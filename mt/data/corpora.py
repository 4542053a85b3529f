"""Parallel corpora as `datasets.Dataset`s of raw (src, tgt) pairs, then encoded once and cached.

A corpus spec in a recipe is one of:
  - a catalog name, optionally with a split: `multi30k`, `multi30k:test_2017_flickr`, `tatoeba`,
    `newstest` (2008-2011 to train, 2012 to validate, 2013 to test), `newstest:newstest2012`,
    `newstest:newsdiscusstest2015`, `hansard` (the training parts; as valid or test, fixed slices
    of the testing parts: `hansard:valid`, `hansard:test`), `europarl` (training only);
  - line-aligned local text files: `{path: text, data_files: {fr: train.fr, en: train.en}}`;
  - anything `datasets.load_dataset` reads, with where the two languages are:
    `{path: wmt14, name: fr-en, split: train, field: translation}` (a column of {fr:, en:} dicts) or
    `{path: csv, data_files: pairs.tsv, delimiter: "\t", columns: {fr: french, en: english}}`.
A training corpus may be weighted: `{corpus: multi30k, repeat: 2}` (or `repeat:` in a mapping
spec) puts each of its pairs into every epoch twice.

A corpus larger than a run can use is drawn, not loaded (`data.draw`): a seeded random choice of its
lines, read as a stream, so that only the chosen pairs are ever held in memory.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np

from mt.data import catalog, technical
from mt.data.batching import Ragged
from mt.data.cleaning import clean_pairs, without_held_out
from mt.errors import UserError
from mt.files import atomic_write, count_lines, read_chosen_lines, read_lines

# The Multi30k split a role takes when a recipe names the corpus alone.
MULTI30K_DEFAULT_SPLIT = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
# WMT's usual roles: the older sets to train on, newstest2012 to validate, newstest2013 to test.
NEWSTEST_DEFAULT_SETS = {"train": catalog.NEWSTEST_SETS[:-2], "valid": ("newstest2012",), "test": ("newstest2013",)}
HANSARD_SPLITS = {
    "train": ("house.training", "senate.training"),
    "valid": ("house.testing",),
    "test": ("senate.testing",),
}
HANSARD_SLICE = 1000
PAIR_FEATURES = datasets.Features({"src": datasets.Value("string"), "tgt": datasets.Value("string")})
ENCODED_FEATURES = datasets.Features(
    {
        "src_ids": datasets.Sequence(datasets.Value("int32")),
        "tgt_ids": datasets.Sequence(datasets.Value("int32")),
        "src_len": datasets.Value("int32"),
        "tgt_len": datasets.Value("int32"),
    }
)
ENCODED_LAYOUT = "ids-int32+lengths"
SPEC_KEYS = {"path", "name", "split", "data_files", "field", "columns", "delimiter", "revision", "repeat", "weight"}

datasets.disable_progress_bars()
datasets.logging.set_verbosity_error()


@dataclass(frozen=True)
class Draw:
    """At most `count` pairs of a corpus, chosen at random: a function of the corpus' size, the
    count and `seed` alone, so a run and its resume read the same pairs."""

    count: int
    seed: tuple[int, ...]

    def rows(self, n: int) -> np.ndarray | None:
        """The rows to keep of `n` (ascending), or None for all of them."""
        if self.count >= n:
            return None
        return np.sort(np.random.default_rng(self.seed).choice(n, self.count, replace=False))


def aligned_files(src_path: Path, tgt_path: Path) -> datasets.Dataset:
    return aligned_parts([(src_path, tgt_path)])


def aligned_parts(parts: list[tuple[Path, Path]], draw: Draw | None = None) -> datasets.Dataset:
    """Line-aligned (source, target) file pairs, one after another, as one corpus; with `draw`, only
    the drawn lines are read (the lines counted first, as a stream)."""
    if draw is not None:
        cached = _draw_cache(parts, draw)
        if cached.is_dir():
            return datasets.load_from_disk(str(cached))
        sizes = [count_lines(src) for src, _ in parts]
        rows = draw.rows(sum(sizes))
        if rows is not None:
            starts = np.cumsum([0, *sizes])
            spans = zip(parts, starts, starts[1:])
            drawn = _pairs_dataset([_drawn_part(s, t, rows[(rows >= a) & (rows < b)] - a) for (s, t), a, b in spans])
            return _saved(drawn, cached)
    return _pairs_dataset([_whole_part(s, t) for s, t in parts])


def _draw_cache(parts: list[tuple[Path, Path]], draw: Draw) -> Path:
    """Where the pairs `draw` takes from `parts` are kept for the next run: named by the draw and by
    each file's path, size and modification time, so a changed file is drawn afresh."""
    key = hashlib.sha256(repr(draw).encode())
    for path in (p for pair in parts for p in pair):
        try:
            stat = Path(path).stat()
        except FileNotFoundError:
            raise UserError(f"{path}: no such file") from None
        key.update(f"|{Path(path).resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return catalog.data_dir() / "cache" / f"drawn-{key.hexdigest()[:20]}"


def _saved(ds: datasets.Dataset, folder: Path) -> datasets.Dataset:
    """`ds` written to `folder` (whole or not at all), and read back from it memory-mapped. Each
    writer has a folder of its own until one rename puts it in place: of two runs drawing the same
    pairs at once, the second to finish finds the first's in place and reads that (the same pairs)."""
    partial = folder.with_name(f"{folder.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    for stale in folder.parent.glob(f"{folder.name}.partial-*"):  # a writer killed mid-write: a day on, gone
        if time.time() - stale.stat().st_mtime > 86_400:
            shutil.rmtree(stale, ignore_errors=True)
    try:
        ds.save_to_disk(str(partial))
        try:
            os.replace(partial, folder)
        except OSError:  # a folder cannot replace a non-empty one: another run's draw is in place
            if not (folder / "dataset_info.json").is_file():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return datasets.load_from_disk(str(folder))


def _misaligned(src_path: Path, n: int, tgt_path: Path, got: int) -> UserError:
    return UserError(f"{src_path} has {n} lines but {tgt_path} has {got}; the two sides must be line-aligned")


def _whole_part(src_path: Path, tgt_path: Path) -> tuple[list[str], list[str]]:
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise _misaligned(src_path, len(src), tgt_path, len(tgt))
    return src, tgt


def _drawn_part(src_path: Path, tgt_path: Path, rows: np.ndarray) -> tuple[list[str], list[str]]:
    (src, n), (tgt, got) = read_chosen_lines(src_path, rows), read_chosen_lines(tgt_path, rows)
    if n != got:
        raise _misaligned(src_path, n, tgt_path, got)
    return src, tgt


def _pairs_dataset(parts: list[tuple[list[str], list[str]]]) -> datasets.Dataset:
    return datasets.Dataset.from_dict(
        {"src": [line for src, _ in parts for line in src], "tgt": [line for _, tgt in parts for line in tgt]}
    )


def _catalog_pairs(spec: str, role: str, src_lang: str, tgt_lang: str, draw: Draw | None) -> datasets.Dataset:
    corpus, _, split = spec.partition(":")

    def files(*names: str) -> list[tuple[Path, Path]]:  # each name with {lang} in it, for both sides
        return [tuple(catalog.corpus_file(corpus, n.format(lang=lang)) for lang in (src_lang, tgt_lang)) for n in names]

    if corpus == "multi30k":
        return aligned_parts(files(f"{split or MULTI30K_DEFAULT_SPLIT[role]}.{{lang}}.gz"), draw)
    if corpus == "tatoeba":
        return _tatoeba_pairs(catalog.corpus_file(corpus, "eng-fra.tsv"), src_lang, tgt_lang, draw)
    if corpus == "hansard":
        return _hansard_pairs(split or role, files, draw)
    if corpus == "europarl":
        if role != "train" or split:
            raise UserError("europarl is a training corpus here (it has no held-out split); validate on newstest")
        return aligned_parts(files("europarl-v7.fr-en.{lang}.xz"), draw)
    if corpus == "newstest":
        sets = (split,) if split else NEWSTEST_DEFAULT_SETS.get(role)
        if sets is None:
            raise UserError(f"name the newstest set to {role} on, e.g. newstest:newstest2012")
        return aligned_parts(files(*(f"{name}.{{lang}}" for name in sets)), draw)
    if corpus in TECHNICAL:
        return _technical_pairs(corpus, split or role, src_lang, tgt_lang, draw)
    catalog.files(corpus)  # unknown name: the catalog's error, with a suggestion
    raise UserError(f"corpus '{corpus}' holds plain text, not translation pairs")


# Each technical corpus's reader, over its catalog files in the catalog's order (mt/data/technical.py).
TECHNICAL = {
    "pydocs_fr": lambda files: technical.gettext_pairs(files[0], r"\.po$"),
    "djangodocs_fr": lambda files: technical.gettext_pairs(files[0], r"/translations/fr/LC_MESSAGES/"),
    "libreoffice_help": lambda files: technical.help_pairs(*files),  # English, then French
    "ml_cheatsheets": lambda files: technical.cheatsheet_pairs(files[0]),
}


def _technical_pairs(corpus: str, split: str, src_lang: str, tgt_lang: str, draw: Draw | None) -> datasets.Dataset:
    """A technical corpus's `split`, its pairs extracted from the published files on first use and
    kept as line-aligned files beside them (`technical.write_splits`; its counts said once)."""
    if {src_lang, tgt_lang} != {"en", "fr"}:
        raise UserError(f"{corpus} holds English-French pairs, not {src_lang}-{tgt_lang}")
    if split not in technical.SPLITS:
        raise UserError(f"{corpus} has the splits {', '.join(technical.SPLITS)}, not '{split}'")
    folder = catalog.data_dir() / corpus / "pairs"
    done = folder / "counts.json"
    if not done.is_file():
        published = [catalog.corpus_file(corpus, rf.name) for rf in catalog.files(corpus)]
        counts = technical.write_splits(TECHNICAL[corpus](published), folder)
        atomic_write(done, lambda tmp: Path(tmp).write_text(json.dumps(counts) + "\n"))
        said = ", ".join(f"{n:,} {name}" for name, n in counts.items())
        print(f"{corpus}: pairs read from its published files: {said}", file=sys.stderr)
    return aligned_parts([(folder / f"{split}.{src_lang}", folder / f"{split}.{tgt_lang}")], draw)


def _tatoeba_pairs(path: Path, src_lang: str, tgt_lang: str, draw: Draw | None) -> datasets.Dataset:
    columns = {"en": 0, "fr": 1}
    if {src_lang, tgt_lang} != set(columns):
        raise UserError(f"tatoeba here holds English-French pairs, not {src_lang}-{tgt_lang}")
    src, tgt = [], []
    for number, line in enumerate(read_lines(path), 1):
        fields = line.split("\t")
        if len(fields) < 2:
            raise UserError(f"{path} line {number}: expected English TAB French, found no tab")
        src.append(fields[columns[src_lang]])
        tgt.append(fields[columns[tgt_lang]])
    ds = datasets.Dataset.from_dict({"src": src, "tgt": tgt})
    rows = draw.rows(len(ds)) if draw else None
    return ds if rows is None else ds.select(rows)


def _hansard_pairs(split: str, files, draw: Draw | None) -> datasets.Dataset:
    """train: both training parts (1.02M pairs). valid and test: HANSARD_SLICE pairs at evenly
    spaced lines of the House and the Senate testing parts (line 1 + floor(i * n / HANSARD_SLICE)
    for i = 0, 1, ...), fixed by the files alone. The release holds the testing parts out of the
    training parts, though the House's stock phrases recur in both."""
    if split not in HANSARD_SPLITS:
        raise UserError(f"hansard has the splits {', '.join(HANSARD_SPLITS)}, not '{split}'")
    parts = files(*(f"{part}.{{lang}}.gz" for part in HANSARD_SPLITS[split]))
    if split == "train":
        return aligned_parts(parts, draw)
    pairs = aligned_parts(parts)
    n = len(pairs)
    pairs = pairs.select(sorted({i * n // HANSARD_SLICE for i in range(min(n, HANSARD_SLICE))}))
    rows = draw.rows(len(pairs)) if draw else None
    return pairs if rows is None else pairs.select(rows)


def _generic_pairs(spec: dict, src_lang: str, tgt_lang: str, draw: Draw | None) -> datasets.Dataset:
    unknown = set(spec) - SPEC_KEYS
    if unknown or "path" not in spec:
        raise UserError(f"corpus spec {spec}: needs 'path' and takes only {', '.join(sorted(SPEC_KEYS))}")
    files = spec.get("data_files")
    if spec["path"] == "text" and isinstance(files, dict) and {src_lang, tgt_lang} <= set(files):
        return aligned_parts([(Path(files[src_lang]), Path(files[tgt_lang]))], draw)
    ds = _loaded_pairs(spec, src_lang, tgt_lang)
    rows = draw.rows(len(ds)) if draw else None
    return ds if rows is None else ds.select(rows)


def _loaded_pairs(spec: dict, src_lang: str, tgt_lang: str) -> datasets.Dataset:
    """A `datasets.load_dataset` spec's pairs, as columns src and tgt."""
    kwargs = {k: spec[k] for k in ("name", "data_files", "delimiter", "revision") if k in spec}
    try:
        ds = datasets.load_dataset(spec["path"], split=spec.get("split", "train"), **kwargs)
    except Exception as e:  # datasets raises many types for missing files, hubs out of reach, bad configs
        raise UserError(
            f"datasets.load_dataset could not read {spec}: {type(e).__name__}: {str(e).splitlines()[0]}"
        ) from None
    if "field" in spec:
        field = spec["field"]
        if field not in ds.column_names:
            raise UserError(f"corpus {spec['path']}: no column '{field}' (columns: {', '.join(ds.column_names)})")
        # A struct column of {lang: text}: flattening splits it into columns without copying data.
        flat = ds.select_columns([field]).flatten()
        wanted = [f"{field}.{src_lang}", f"{field}.{tgt_lang}"]
        if not set(wanted) <= set(flat.column_names):
            raise UserError(f"corpus {spec['path']}: column '{field}' holds no {src_lang!r} and {tgt_lang!r} texts")
        return flat.select_columns(wanted).rename_columns(dict(zip(wanted, ["src", "tgt"])))
    columns = spec.get("columns", {src_lang: src_lang, tgt_lang: tgt_lang})
    missing = [
        columns.get(lang, lang) for lang in (src_lang, tgt_lang) if columns.get(lang, lang) not in ds.column_names
    ]
    if missing:
        raise UserError(
            f"corpus {spec['path']}: no column {missing[0]!r} (columns: {', '.join(ds.column_names)}); "
            "name them with 'columns'"
        )
    ds = ds.select_columns([columns[src_lang], columns[tgt_lang]])
    return ds.rename_columns({columns[src_lang]: "src", columns[tgt_lang]: "tgt"})


def corpus_options(spec) -> tuple[str | dict, int, float | None]:
    """(the corpus spec itself, its `repeat`, its mixing `weight` or None)."""
    if not isinstance(spec, dict):
        return spec, 1, None
    spec = dict(spec)
    repeat, weight = spec.pop("repeat", 1), spec.pop("weight", None)
    if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
        raise UserError(f"corpus spec {spec}: repeat must be a whole number >= 1, got {repeat!r}")
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0):
        raise UserError(f"corpus spec {spec}: weight must be a positive number, got {weight!r}")
    if "corpus" in spec:
        if set(spec) != {"corpus"} or not isinstance(spec["corpus"], str):
            raise UserError(
                f"corpus spec {spec}: with 'corpus' (a catalog name) only 'repeat' or 'weight' may be given"
            )
        return spec["corpus"], repeat, weight
    return spec, repeat, weight


def corpus_weights(specs: list) -> list[float] | None:
    """Each training corpus' mixing weight, or None when none has one."""
    weights = [corpus_options(s)[2] for s in specs]
    return weights if all(w is not None for w in weights) else None


def spec_label(spec) -> str:
    """A short name for a corpus spec in logs and metrics: 'multi30k', 'newstest2013', 'my.fr'."""
    spec = corpus_options(spec)[0]
    if isinstance(spec, str):
        corpus, _, split = spec.partition(":")
        return split if corpus == "newstest" and split else spec.replace(":", "_")
    files = spec.get("data_files")
    first = next(iter(files.values())) if isinstance(files, dict) else files
    return Path(str(first)).stem if first else str(spec.get("path"))


def load_pairs(spec, role: str, src_lang: str, tgt_lang: str, draw: Draw | None = None) -> datasets.Dataset:
    """One corpus spec -> a Dataset with string columns `src` and `tgt` (with `draw`, its drawn pairs)."""
    spec = corpus_options(spec)[0]
    if isinstance(spec, str):
        return _catalog_pairs(spec, role, src_lang, tgt_lang, draw)
    ds = _generic_pairs(spec, src_lang, tgt_lang, draw)
    return ds if ds.features == PAIR_FEATURES else ds.cast(PAIR_FEATURES)  # so corpora concatenate


def _draws(options: list, draw: int | None, seed: int) -> list[Draw | None]:
    """Each corpus' draw: its weight's share of `draw` pairs (without weights, at most `draw` each)."""
    if draw is None:
        return [None] * len(options)
    weights = [weight for _, _, weight in options]
    shares = [w / sum(weights) for w in weights] if None not in weights else [1.0] * len(options)
    return [Draw(math.ceil(draw * share), (seed, i)) for i, share in enumerate(shares)]


def load_corpora(
    specs: list,
    role: str,
    src_lang: str,
    tgt_lang: str,
    clean: bool = False,
    dedup: bool = False,
    log=sys.stderr,
    draw: int | None = None,
    seed: int = 0,
    held_out: frozenset[str] = frozenset(),
) -> tuple[datasets.Dataset, np.ndarray, list[int] | None]:
    """The corpora, each cleaned as asked (mt.data.cleaning: duplicates are looked for within each
    corpus) and without the pairs whose source is `held_out` (a validation or test sentence),
    concatenated; for each pair how many times it goes into an epoch; and with mixing weights
    (mt.data.mixing), each corpus' pair count instead of repeats. With `draw`, a corpus gives at
    most its share of that many pairs (`_draws`), chosen by `seed`."""
    options = [corpus_options(s) for s in specs]
    weighted = [weight is not None for _, _, weight in options]
    if any(weighted) and not all(weighted):
        raise UserError("data.train: give every training corpus a weight, or none (repeat then weights them)")
    if any(weighted) and any(repeat != 1 for _, repeat, _ in options):
        raise UserError("data.train: a corpus has both weight and repeat; with weights, the weights alone decide")
    parts = []
    for spec, drawn in zip(specs, _draws(options, draw, seed)):
        pairs = load_pairs(spec, role, src_lang, tgt_lang, drawn)
        if drawn is not None and len(pairs) == drawn.count and log is not None:
            print(f"{role} {spec_label(spec)}: drew {drawn.count:,} pairs at random (data.draw)", file=log)
        cleaned = clean_pairs(pairs, clean, dedup, f"{role} {spec_label(spec)}", log)
        parts.append(without_held_out(cleaned, held_out, f"{role} {spec_label(spec)}", log))
    repeats = np.concatenate([np.full(len(p), repeat, dtype=np.int32) for p, (_, repeat, _) in zip(parts, options)])
    sizes = [len(p) for p in parts] if all(weighted) else None
    return (parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)), repeats, sizes


def auto_num_proc(n_pairs: int) -> int:
    """Worker processes for encoding: one per 100k pairs, at most one per core (spawning costs a second)."""
    return max(1, min(os.cpu_count() or 1, n_pairs // 100_000))


def encode_pairs(
    ds: datasets.Dataset, tokenizer, cache_dir: Path | None, num_proc: int = 1, progress: str | None = None
) -> datasets.Dataset:
    """Token ids and lengths of every pair, in an Arrow file cached by content under `cache_dir`:
    memory-mapped, so a corpus larger than memory stays on disk, and a second run does not
    re-tokenize. Columns: src_ids, tgt_ids (int32 lists), src_len, tgt_len; rows as in `ds`."""
    cache_file = None
    if cache_dir is not None:
        key = hashlib.sha256(ENCODED_LAYOUT.encode())  # a new layout never reads an old file
        key.update(ds._fingerprint.encode())
        key.update(tokenizer.fingerprint().encode())
        cache_dir.mkdir(parents=True, exist_ok=True)
        cache_file = str(cache_dir / f"encoded-{key.hexdigest()[:20]}.arrow")

    def encode(batch):
        src, tgt = tokenizer.encode_batch(batch["src"]), tokenizer.encode_batch(batch["tgt"], "tgt")
        return {"src_ids": src, "tgt_ids": tgt, "src_len": [len(x) for x in src], "tgt_len": [len(x) for x in tgt]}

    if progress and not (cache_file and Path(cache_file).is_file()):  # a bar only when there is work to show
        datasets.enable_progress_bars()
    try:
        return ds.map(
            encode,
            batched=True,
            batch_size=2000,
            features=ENCODED_FEATURES,
            remove_columns=ds.column_names,
            num_proc=num_proc if num_proc > 1 else None,
            cache_file_name=cache_file,
            load_from_cache_file=True,
            new_fingerprint=Path(cache_file).stem if cache_file else None,
            desc=progress,
        )
    finally:
        datasets.disable_progress_bars()


def filter_pairs(
    src_lens: np.ndarray,
    tgt_lens: np.ndarray,
    max_len: int,
    max_ratio: float,
    what: str,
    log=sys.stderr,
    also: dict[str, np.ndarray] | None = None,
) -> np.ndarray:
    """Rows to keep: not empty, within `max_len` tokens, and lengths (each counting its <END>)
    within `max_ratio` of each other, and dropped by none of the masks in `also` (by rule name).
    Reports how many pairs each rule dropped (a pair counts for the first rule that drops it)."""
    empty = (src_lens == 0) | (tgt_lens == 0)
    too_long = ~empty & ((src_lens > max_len) | (tgt_lens > max_len))
    s, t = src_lens + 1, tgt_lens + 1
    ratio = ~empty & ~too_long & (np.maximum(s, t) > max_ratio * np.minimum(s, t))
    rules, dropped_rows = {"empty": empty, "too long": too_long, "length ratio": ratio}, empty | too_long | ratio
    for name, mask in (also or {}).items():
        rules[name] = mask & ~dropped_rows
        dropped_rows = dropped_rows | mask
    keep = np.flatnonzero(~dropped_rows)
    dropped = len(src_lens) - len(keep)
    detail = ", ".join(f"{int(mask.sum()):,} {why}" for why, mask in rules.items() if mask.any())
    if log is not None:
        print(
            f"{what}: {len(src_lens):,} pairs, kept {len(keep):,}"
            + (f", dropped {dropped:,} ({detail})" if dropped else ""),
            file=log,
        )
    if not len(keep):
        raise UserError(f"{what}: no pair is left after filtering; check the corpus and data.max_len")
    return keep


class EncodedCorpus:
    """A filtered, encoded parallel corpus. The ids stay in memory-mapped Arrow; memory holds only
    the kept row numbers and their lengths, which is all the batch sampler needs."""

    def __init__(
        self,
        pairs: datasets.Dataset,
        tokenizer,
        cache_dir: Path | None,
        max_len: int,
        max_ratio: float,
        what: str,
        num_proc: int = 0,
        log=sys.stderr,
        repeats: np.ndarray | None = None,
        sizes: list[int] | None = None,
    ):
        self.pairs = pairs  # the raw text, same row order: references and subword sampling read it
        encoded = encode_pairs(
            pairs,
            tokenizer,
            cache_dir,
            num_proc or auto_num_proc(len(pairs)),
            progress=f"encoding {what}" if log is not None else None,
        )
        lens = encoded.with_format("arrow", columns=["src_len", "tgt_len"])[:]  # zero-copy views
        src_lens, tgt_lens = (lens.column(c).to_numpy().astype(np.int32) for c in ("src_len", "tgt_len"))
        self.rows = filter_pairs(src_lens, tgt_lens, max_len, max_ratio, what, log)
        if repeats is not None:  # repeated corpora: a pair's row appears once per repeat
            self.rows = np.repeat(self.rows, repeats[self.rows])
        # which corpus each kept pair came from (mixing by weight draws each corpus' share)
        self.corpus_of = np.searchsorted(np.cumsum(sizes), self.rows, side="right") if sizes else None
        self.src_lens, self.tgt_lens = src_lens[self.rows], tgt_lens[self.rows]
        self._ids = encoded.with_format("arrow", columns=["src_ids", "tgt_ids"])

    def __len__(self) -> int:
        return len(self.rows)

    def ids(self, batch: np.ndarray) -> tuple[Ragged, Ragged]:
        """Source and target ids of pairs `batch` (positions among the kept pairs)."""
        table = self._ids[self.rows[batch]]
        return Ragged.from_arrow(table.column("src_ids")), Ragged.from_arrow(table.column("tgt_ids"))

    def texts(self, batch: np.ndarray, column: str) -> list[str]:
        return self.pairs[self.rows[batch]][column]

    def all_texts(self, column: str) -> list[str]:
        return columns(self.pairs.select(self.rows), column)[0]


def columns(ds: datasets.Dataset, *names: str) -> list[list]:
    """Columns as Python lists in one pass (indexing a datasets Column row by row is slow)."""
    table = ds.select_columns(list(names)).to_dict()
    return [table[n] for n in names]


def sample_texts(train: datasets.Dataset, max_pairs: int, seed: int, mix=None) -> Iterator[str]:
    """Both sides of at most `max_pairs` training pairs, drawn at random when there are more, read
    in chunks so a corpus larger than memory never has to fit in it. `mix` (each corpus' size and
    weight, in order): each corpus gives its weight's share of the pairs, as many as it has at most."""
    rng = np.random.default_rng(seed)
    if mix:
        sizes, weights = mix
        starts, total = np.cumsum([0, *sizes[:-1]]), min(max_pairs, len(train))
        wanted = [min(n, round(total * w / sum(weights))) for n, w in zip(sizes, weights)]
        rows = [start + rng.choice(n, k, replace=False) for start, n, k in zip(starts, sizes, wanted)]
        train = train.select(np.sort(np.concatenate(rows)))
    elif len(train) > max_pairs:
        rows = np.sort(rng.choice(len(train), max_pairs, replace=False))
        train = train.select(rows)
    for column in ("src", "tgt"):  # all sources, then all targets: the order the trainer saw before
        for chunk in train.select_columns([column]).iter(batch_size=10_000):
            yield from chunk[column]

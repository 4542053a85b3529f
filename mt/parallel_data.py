"""Parallel corpora as `datasets.Dataset`s of raw (src, tgt) pairs, then encoded once and cached.

A corpus spec in a recipe is one of:
  - a catalog name, optionally with a split: `multi30k`, `multi30k:test_2017_flickr`, `tatoeba`;
  - line-aligned local text files: `{path: text, data_files: {fr: train.fr, en: train.en}}`;
  - anything `datasets.load_dataset` reads, with where the two languages are:
    `{path: wmt14, name: fr-en, split: train, field: translation}` (a column of {fr:, en:} dicts) or
    `{path: csv, data_files: pairs.tsv, delimiter: "\t", columns: {fr: french, en: english}}`.
"""

from __future__ import annotations

import gzip
import hashlib
import sys
from pathlib import Path

import datasets

from mt import catalog
from mt.errors import UserError

# The Multi30k split a role takes when a recipe names the corpus alone.
MULTI30K_DEFAULT_SPLIT = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
PAIR_FEATURES = datasets.Features({"src": datasets.Value("string"), "tgt": datasets.Value("string")})
SPEC_KEYS = {"path", "name", "split", "data_files", "field", "columns", "delimiter", "revision"}

datasets.disable_progress_bars()
datasets.logging.set_verbosity_error()


def read_lines(path: Path) -> list[str]:
    """Lines of a UTF-8 text file (gzip if it ends in .gz); invalid UTF-8 names file and line."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for number, line in enumerate(lines, 1):
        try:
            out.append(line.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as e:
            raise UserError(f"{path} line {number}: invalid UTF-8 ({e.reason} at byte {e.start}); fix or re-encode the file") from None
    return out


def aligned_files(src_path: Path, tgt_path: Path) -> datasets.Dataset:
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise UserError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; the two sides must be line-aligned")
    return datasets.Dataset.from_dict({"src": src, "tgt": tgt})


def _catalog_pairs(spec: str, role: str, src_lang: str, tgt_lang: str) -> datasets.Dataset:
    corpus, _, split = spec.partition(":")
    if corpus == "multi30k":
        split = split or MULTI30K_DEFAULT_SPLIT[role]
        return aligned_files(
            catalog.corpus_file(corpus, f"{split}.{src_lang}.gz"), catalog.corpus_file(corpus, f"{split}.{tgt_lang}.gz")
        )
    if corpus == "tatoeba":
        path = catalog.corpus_file(corpus, "eng-fra.tsv")
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
        return datasets.Dataset.from_dict({"src": src, "tgt": tgt})
    catalog.files(corpus)  # unknown name: the catalog's error, with a suggestion
    raise UserError(f"corpus '{corpus}' holds plain text, not translation pairs")


def _generic_pairs(spec: dict, src_lang: str, tgt_lang: str) -> datasets.Dataset:
    unknown = set(spec) - SPEC_KEYS
    if unknown or "path" not in spec:
        raise UserError(f"corpus spec {spec}: needs 'path' and takes only {', '.join(sorted(SPEC_KEYS))}")
    files = spec.get("data_files")
    if spec["path"] == "text" and isinstance(files, dict) and {src_lang, tgt_lang} <= set(files):
        return aligned_files(Path(files[src_lang]), Path(files[tgt_lang]))
    kwargs = {k: spec[k] for k in ("name", "data_files", "delimiter", "revision") if k in spec}
    try:
        ds = datasets.load_dataset(spec["path"], split=spec.get("split", "train"), **kwargs)
    except Exception as e:  # datasets raises many types for missing files, hubs out of reach, bad configs
        raise UserError(f"datasets.load_dataset could not read {spec}: {type(e).__name__}: {str(e).splitlines()[0]}") from None
    if "field" in spec:
        field = spec["field"]
        if field not in ds.column_names:
            raise UserError(f"corpus {spec['path']}: no column '{field}' (columns: {', '.join(ds.column_names)})")
        return ds.map(lambda b: {"src": [p[src_lang] for p in b[field]], "tgt": [p[tgt_lang] for p in b[field]]},
                      batched=True, remove_columns=ds.column_names)
    columns = spec.get("columns", {src_lang: src_lang, tgt_lang: tgt_lang})
    missing = [columns.get(lang, lang) for lang in (src_lang, tgt_lang) if columns.get(lang, lang) not in ds.column_names]
    if missing:
        raise UserError(f"corpus {spec['path']}: no column {missing[0]!r} (columns: {', '.join(ds.column_names)}); name them with 'columns'")
    ds = ds.select_columns([columns[src_lang], columns[tgt_lang]])
    return ds.rename_columns({columns[src_lang]: "src", columns[tgt_lang]: "tgt"})


def load_pairs(spec, role: str, src_lang: str, tgt_lang: str) -> datasets.Dataset:
    """One corpus spec -> a Dataset with string columns `src` and `tgt`."""
    if isinstance(spec, str):
        return _catalog_pairs(spec, role, src_lang, tgt_lang)
    ds = _generic_pairs(spec, src_lang, tgt_lang)
    return ds if ds.features == PAIR_FEATURES else ds.cast(PAIR_FEATURES)  # so corpora concatenate


def load_corpora(specs: list, role: str, src_lang: str, tgt_lang: str) -> datasets.Dataset:
    parts = [load_pairs(s, role, src_lang, tgt_lang) for s in specs]
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)


def encode_pairs(ds: datasets.Dataset, tokenizer, cache_dir: Path | None) -> datasets.Dataset:
    """Add `src_ids`/`tgt_ids` columns, cached on disk by content: a second run does not re-tokenize."""
    cache_file = None
    if cache_dir is not None:
        key = hashlib.sha256()
        key.update(ds._fingerprint.encode())
        key.update(tokenizer.fingerprint().encode())
        cache_dir.mkdir(parents=True, exist_ok=True)
        cache_file = str(cache_dir / f"encoded-{key.hexdigest()[:20]}.arrow")

    def encode(batch):
        return {"src_ids": tokenizer.encode_batch(batch["src"]), "tgt_ids": tokenizer.encode_batch(batch["tgt"])}

    return ds.map(encode, batched=True, batch_size=2000, cache_file_name=cache_file, load_from_cache_file=True,
                  new_fingerprint=Path(cache_file).stem if cache_file else None)


def filter_pairs(ds: datasets.Dataset, max_len: int, max_ratio: float, what: str, log=sys.stderr) -> datasets.Dataset:
    """Drop empty pairs, pairs over `max_len` tokens and pairs whose lengths (each counting its
    <END>) differ by more than `max_ratio`; report how many of each."""
    src_ids, tgt_ids = columns(ds, "src_ids", "tgt_ids")
    src_lens, tgt_lens = [len(x) for x in src_ids], [len(x) for x in tgt_ids]
    counts = {"empty": 0, "too long": 0, "length ratio": 0}
    keep = []
    for i, (s, t) in enumerate(zip(src_lens, tgt_lens)):
        if s == 0 or t == 0:
            counts["empty"] += 1
        elif s > max_len or t > max_len:
            counts["too long"] += 1
        elif max(s + 1, t + 1) > max_ratio * min(s + 1, t + 1):
            counts["length ratio"] += 1
        else:
            keep.append(i)
    dropped = len(ds) - len(keep)
    detail = ", ".join(f"{n} {why}" for why, n in counts.items() if n)
    if log is not None:
        print(f"{what}: {len(ds):,} pairs, kept {len(keep):,}" + (f", dropped {dropped:,} ({detail})" if dropped else ""), file=log)
    if not keep:
        raise UserError(f"{what}: no pair is left after filtering; check the corpus and data.max_len")
    return ds.select(keep) if dropped else ds


def columns(ds: datasets.Dataset, *names: str) -> list[list]:
    """Columns as Python lists in one pass (indexing a datasets Column row by row is slow)."""
    table = ds.select_columns(list(names)).to_dict()
    return [table[n] for n in names]

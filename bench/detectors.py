"""Language detection for `source: auto`: candidate libraries on short French and English texts,
each restricted to the two where it can be, for accuracy and time per text.

    pip install lingua-language-detector langdetect   # the candidates beside py3langid (mt's)
    python bench/detectors.py [--data ../shared/data] [--per 2000] [--out bench/results/detectors.json]

Texts come from the mirror's validation and test material only (Multi30k val and tests, news test
sets, Hansard's testing part, Tatoeba), in three buckets per language: whole sentences, their first
one to three words, and sentences of 20 to 60 characters. A candidate not installed is said so and
skipped. Time is the median of single calls, warm; load is import, build and a first call.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import sys
import time
from pathlib import Path

LANGS = ("fr", "en")


def _lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        return [" ".join(line.split()) for line in f if len(line.split()) >= 3 and any(c.islower() for c in line)]


def sentences(data: Path) -> dict[str, list[str]]:
    """Each language's validation and test sentences, from every corpus of the mirror that has them."""
    found = {}
    for lang in LANGS:
        files = [data / f"multi30k/{s}.{lang}.gz" for s in ("val", "test_2016_flickr", "test_2017_flickr")]
        files += sorted((data / "newstest").glob(f"*.{lang}")) + sorted((data / "hansard").glob(f"*.testing.{lang}.gz"))
        found[lang] = [s for f in files if f.is_file() for s in _lines(f)]
    tatoeba = data / "tatoeba/eng-fra.tsv"
    if tatoeba.is_file():
        rows = [line.rstrip("\n").split("\t") for line in tatoeba.open(encoding="utf-8")]
        found["en"] += [" ".join(r[0].split()) for r in rows if len(r) >= 2]
        found["fr"] += [" ".join(r[1].split()) for r in rows if len(r) >= 2]
    return {lang: sorted(set(texts)) for lang, texts in found.items()}


def buckets(found: dict[str, list[str]], per: int, seed: int = 0) -> dict[str, list[tuple[str, str]]]:
    """(language, text) items per bucket; the few words that both languages begin with are left out."""
    rng = random.Random(seed)
    words = {lang: [" ".join(s.split()[: rng.choice((1, 2, 3))]) for s in texts] for lang, texts in found.items()}
    shared = {w.lower() for w in words["fr"]} & {w.lower() for w in words["en"]}
    pools = {
        "sentences": found,
        "1-3 words": {lang: [w for w in dict.fromkeys(ws) if w.lower() not in shared] for lang, ws in words.items()},
        "20-60 characters": {lang: [s for s in texts if 20 <= len(s) <= 60] for lang, texts in found.items()},
    }
    return {name: [(lang, t) for lang in LANGS for t in rng.sample(pool[lang], min(per, len(pool[lang])))]
            for name, pool in pools.items()}  # fmt: skip


def py3langid():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    identifier.set_languages(list(LANGS))
    return lambda text: identifier.classify(text)[0]


def lingua():
    from lingua import IsoCode639_1, LanguageDetectorBuilder

    detector = LanguageDetectorBuilder.from_iso_codes_639_1(*(IsoCode639_1.from_str(c) for c in LANGS)).build()

    def first(text):
        found = detector.detect_language_of(text)
        return found.iso_code_639_1.name.lower() if found else "en"

    return first


def langdetect():
    from langdetect import DetectorFactory, detect_langs

    DetectorFactory.seed = 0  # it samples: without a seed, answers vary from call to call

    def first(text):
        try:
            return next((r.lang for r in detect_langs(text) if r.lang in LANGS), "en")
        except Exception:  # noqa: BLE001 - it raises on text without letters
            return "en"

    return first


CANDIDATES = {"py3langid": py3langid, "lingua": lingua, "langdetect": langdetect}


def measure(make, items: dict[str, list[tuple[str, str]]]) -> dict:
    started = time.perf_counter()
    detect = make()
    detect("Bonjour tout le monde")
    row = {"load_s": round(time.perf_counter() - started, 2)}
    times = []
    for name, pairs in items.items():
        right = 0
        for lang, text in pairs:
            t = time.perf_counter()
            right += detect(text) == lang
            times.append(time.perf_counter() - t)
        row[name] = round(100 * right / len(pairs), 1)
    row["us_per_text"] = round(1e6 * statistics.median(times))
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    p.add_argument("--per", type=int, default=2000, help="texts per language and bucket")
    p.add_argument("--out", type=Path, default=Path("bench/results/detectors.json"))
    args = p.parse_args(argv)
    items = buckets(sentences(args.data), args.per)
    print("items:", {name: len(pairs) for name, pairs in items.items()})
    rows = {}
    for name, make in CANDIDATES.items():
        try:
            rows[name] = measure(make, items)
        except ImportError as e:
            rows[name] = {"skipped": f"not installed ({e.name})"}
        print(f"{name:<11} {rows[name]}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"items": {k: len(v) for k, v in items.items()}, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

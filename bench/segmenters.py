"""Sentence segmenters on paragraphs joined from the WMT news test sets: boundary precision and
recall, and speed, French and English.

    pip install sentencex pysbd sentence-splitter
    python bench/segmenters.py            # needs the newstest corpus (downloaded, or MT_DATA_MIRROR)

Each test set (2008 to 2013) is cut into runs of 3 to 5 consecutive lines (seeded), each run
joined by a space into a paragraph; a true boundary is where one line ends and the next begins. A
segmenter's boundaries are where its sentences start, past the first. Lines that hold two
sentences count against every segmenter alike. Writes bench/results/segmenters.json.
"""

import argparse
import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mt.data import catalog  # noqa: E402


def paragraphs(lines: list[str], seed: int) -> list[list[str]]:
    """Runs of 3 to 5 consecutive non-empty lines."""
    rng, out, i = random.Random(seed), [], 0
    lines = [line.strip() for line in lines if line.strip()]
    while i < len(lines):
        n = rng.randint(3, 5)
        out.append(lines[i : i + n])
        i += n
    return out


def boundaries(text: str, sentences: list[str]) -> set[int]:
    """Where each sentence but the first starts in `text` (segmenters may trim or keep spaces)."""
    found, at = set(), 0
    for k, sentence in enumerate(sentences):
        piece = sentence.strip()
        if not piece:
            continue
        start = text.find(piece, at)
        if start < 0:  # a segmenter that rewrote the text: skip what cannot be placed
            continue
        if k > 0 and start > 0:
            found.add(start)
        at = start + len(piece)
    return found


def truth(run: list[str]) -> tuple[str, set[int]]:
    text, starts = "", set()
    for line in run:
        if text:
            text += " "
            starts.add(len(text))
        text += line
    return text, starts


def segmenters(lang: str) -> dict:
    from pysbd import Segmenter
    from sentence_splitter import SentenceSplitter
    from sentencex import segment

    pysbd = Segmenter(language=lang, clean=False)
    moses = SentenceSplitter(language=lang)
    return {
        "sentencex": lambda text: list(segment(lang, text)),
        "pysbd": pysbd.segment,
        "moses (sentence-splitter)": moses.split,
    }


def measure(split, runs: list[list[str]]) -> dict:
    hit = predicted = gold = sentences = 0
    started = time.perf_counter()
    for run in runs:
        text, wanted = truth(run)
        got = boundaries(text, split(text))
        hit, predicted, gold, sentences = (
            hit + len(got & wanted),
            predicted + len(got),
            gold + len(wanted),
            sentences + len(run),
        )
    seconds = time.perf_counter() - started
    return {
        "precision": round(hit / max(predicted, 1), 4),
        "recall": round(hit / max(gold, 1), 4),
        "lines_per_s": round(sentences / seconds),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=REPO / "bench/results/segmenters.json")
    args = p.parse_args(argv)
    folder = catalog.fetch("newstest")
    rows = []
    for lang in ("fr", "en"):
        runs = []
        for name in catalog.NEWSTEST_SETS:
            lines = (folder / f"{name}.{lang}").read_text(encoding="utf-8").splitlines()
            runs += paragraphs(lines, args.seed)
        for name, split in segmenters(lang).items():
            row = {"language": lang, "segmenter": name, "paragraphs": len(runs), **measure(split, runs)}
            rows.append(row)
            print(
                f"{lang}  {name:<26} precision {row['precision']:.3f}  recall {row['recall']:.3f}  "
                f"{row['lines_per_s']:>7,} lines/s"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

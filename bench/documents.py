"""Document mode against sentence mode: paragraphs of 3 to 5 consecutive sentences of newstest2012
and newstest2013 (sources and references joined alike), translated three ways and scored with
sacreBLEU against the joined references.

    python bench/documents.py --model runs/fr_en        # needs the newstest corpus (or MT_DATA_MIRROR)

- sentences: the original sentences one per line, their translations joined per paragraph;
- documents: each paragraph on one line, cut into sentences and joined back (mt.translate's default);
- whole lines: each paragraph as one sentence (mt.translate --no-split).
Writes bench/results/documents.json.
"""

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mt.data import catalog  # noqa: E402
from mt.inference.documents import translate_lines  # noqa: E402
from mt.inference.metrics import corpus_scores  # noqa: E402
from mt.inference.translator import Translator  # noqa: E402

SETS = ("newstest2012", "newstest2013")


def runs(n: int, seed: int) -> list[range]:
    """Consecutive runs of 3 to 5 line numbers covering 0..n-1."""
    import random

    rng, out, i = random.Random(seed), [], 0
    while i < n:
        k = rng.randint(3, 5)
        out.append(range(i, min(i + k, n)))
        i += k
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="runs/fr_en")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--out", type=Path, default=REPO / "bench/results/documents.json")
    args = p.parse_args(argv)
    translator = Translator.load(args.model)
    folder, src, ref, groups = catalog.fetch("newstest"), [], [], []
    for name in SETS:
        fr = (folder / f"{name}.fr").read_text(encoding="utf-8").splitlines()
        en = (folder / f"{name}.en").read_text(encoding="utf-8").splitlines()
        groups += [range(r.start + len(src), r.stop + len(src)) for r in runs(len(fr), args.seed)]
        src, ref = src + fr, ref + en
    paragraphs = [" ".join(src[i].strip() for i in g) for g in groups]
    references = [" ".join(ref[i].strip() for i in g) for g in groups]
    rows, options = {}, translator.options
    for name, lines, split in (
        ("sentences", src, False),
        ("documents", paragraphs, True),
        ("whole lines", paragraphs, False),
    ):
        started = time.perf_counter()
        out = translate_lines(translator, lines, options, args.batch_size, split=split)
        hyp = [" ".join(out.lines[i] for i in g) for g in groups] if name == "sentences" else out.lines
        scores = corpus_scores(hyp, references)
        rows[name] = {
            "bleu": scores["bleu"],
            "chrf": scores["chrf"],
            "sentences": out.sentences,
            "cut_at_clauses": out.long_sentences,
            "seconds": round(time.perf_counter() - started, 1),
        }
        print(f"{name:<12} BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  {rows[name]}")
    result = {"model": args.model, "paragraphs": len(groups), "sentences": len(src), "decoding": options.name, **rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A lexical shortlist (mt/inference/shortlist.py) against the whole output layer, on a CPU: BLEU
and sentences per second, beam 5 and greedy, on 2 threads and 1, measured back to back.

    python -m mt.shortlist runs/fr_en                       # learn runs/fr_en/shortlist.pt first
    python bench/shortlist.py --model runs/fr_en             # the run's first validation set, 1,000 sentences
    python bench/shortlist.py --model runs/fr_en --quantize int8 --valid newstest:newstest2013 --limit 0

One model is loaded once; each setting (beam, threads) translates the sentences with and without
the shortlist in turn, `--repeat` times, so that a slow minute of a shared machine hits both alike,
and reports the medians, the ratio of the medians, and BLEU (the outputs do not change from one
repeat to the next). Also printed: how many output rows a batch computes with the shortlist, the
union of its sentences' allowed pieces, against the vocabulary. `--out` writes the rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sacrebleu  # noqa: E402
import torch  # noqa: E402

from mt.data.corpora import columns, load_pairs  # noqa: E402
from mt.errors import UserError, cli_entry  # noqa: E402
from mt.inference.translator import Translator  # noqa: E402


def timed(translator: Translator, sources: list[str], options, batch_size: int) -> tuple[float, list[str]]:
    start = time.perf_counter()
    out = translator.translate(sources, options, batch_size=batch_size, warn_truncated=False)
    return time.perf_counter() - start, out


def rows_computed(translator: Translator, sources: list[str], batch_size: int) -> float:
    """The mean number of output rows a batch computes with the shortlist."""
    sizes = [
        translator.shortlist.allowed(src).numel()
        for _, src in translator.batches(translator.encode(sources, warn_truncated=False), batch_size)
    ]
    return statistics.mean(sizes)


def compare(translator, sources, references, beam: int, threads: int, args) -> dict:
    """One setting's row: both ways in turn, `args.repeat` times; medians, their ratio, BLEU."""
    torch.set_num_threads(threads)
    seconds: dict[bool, list[float]] = {False: [], True: []}
    outputs: dict[bool, list[str]] = {}
    for _ in range(args.repeat):
        for on in (False, True):
            options = translator.options.replace(beam=beam, temperature=0.0, shortlist=on)
            took, outputs[on] = timed(translator, sources, options, args.batch_size)
            seconds[on].append(took)
    row = {"beam": beam, "threads": threads}
    for on, name in ((False, "whole"), (True, "shortlist")):
        median = statistics.median(seconds[on])
        bleu = sacrebleu.corpus_bleu(outputs[on], [references]).score
        row[name] = {"seconds": round(median, 2), "sent_per_s": round(len(sources) / median, 1), "bleu": round(bleu, 2)}
    row["speedup"] = round(statistics.median(seconds[False]) / statistics.median(seconds[True]), 2)
    row["same_output"] = sum(a == b for a, b in zip(outputs[False], outputs[True])) / len(sources)
    return row


def parse_args(argv):
    p = argparse.ArgumentParser(prog="bench/shortlist.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="runs/fr_en", help="a run directory with a shortlist.pt")
    p.add_argument("--valid", help="the corpus spec to translate (default: the run's first validation set)")
    p.add_argument("--limit", type=int, default=1000, help="its first N sentences (0: all; default 1000)")
    p.add_argument("--beams", default="5,1", help="beam sizes, comma-separated (default 5,1; 1 is greedy)")
    p.add_argument("--threads", default="2,1", help="thread counts, comma-separated (default 2,1)")
    p.add_argument("--repeat", type=int, default=3, help="translations per way and setting (default 3)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--quantize", choices=["int8"], help="int8 weights")
    p.add_argument("--out", help="write the rows as JSON here")
    return p.parse_args(argv)


@cli_entry
def main(argv=None):
    args = parse_args(argv)
    translator = Translator.load(args.model, "cpu", args.quantize)
    if translator.shortlist is None:
        raise UserError(f"{args.model} has no shortlist.pt; learn one with: python -m mt.shortlist {args.model}")
    cfg = translator.cfg
    spec = args.valid or next(iter(cfg.data.valid_sets), None)
    if spec is None:
        raise UserError(f"{args.model} names no validation set; give --valid")
    sources, references = columns(load_pairs(spec, "valid", cfg.data.src_lang, cfg.data.tgt_lang), "src", "tgt")
    if args.limit:
        sources, references = sources[: args.limit], references[: args.limit]
    computed = rows_computed(translator, sources, args.batch_size)
    print(
        f"{args.model} ({args.quantize or 'fp32'}) on {spec}: {len(sources)} sentences; a batch computes "
        f"{computed:.0f} of {translator.vocab} output rows with the shortlist",
        file=sys.stderr,
    )
    rows = []
    print("beam threads | whole: sent/s BLEU | shortlist: sent/s BLEU | speedup | same output")
    for beam in (int(b) for b in args.beams.split(",")):
        for threads in (int(t) for t in args.threads.split(",")):
            row = compare(translator, sources, references, beam, threads, args)
            rows.append(row)
            w, s = row["whole"], row["shortlist"]
            print(
                f"{beam:>4} {threads:>7} | {w['sent_per_s']:>12} {w['bleu']:>5} | {s['sent_per_s']:>16} {s['bleu']:>5} "
                f"| {row['speedup']:>6}x | {row['same_output']:.1%}",
                flush=True,
            )
    if args.out:
        meta = {"model": args.model, "quantize": args.quantize, "valid": str(spec), "sentences": len(sources)}
        Path(args.out).write_text(json.dumps({**meta, "rows_computed": round(computed), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

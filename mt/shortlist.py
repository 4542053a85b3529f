"""python -m mt.shortlist RUN_DIR [--pairs N] [--per-source K] [--frequent N] [--src FILE --tgt FILE | --corpus NAME]

Learns a lexical shortlist for RUN_DIR (mt/inference/shortlist.py) from its recipe's training
corpora, or from given line-aligned files or catalog corpora (an imported model has no corpora of
its own), and saves it as RUN_DIR/shortlist.pt. Decoding on a CPU then computes the output layer
over the target pieces a batch's sources can produce; --no-shortlist turns it off.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tqdm import tqdm

from mt.errors import UserError, cli_entry
from mt.files import read_lines
from mt.inference.shortlist import FREQUENT, PER_SOURCE, drawn, learn_shortlist, training_pairs


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m mt.shortlist", description="Learn a run's lexical shortlist.")
    p.add_argument("run_dir", help="the run directory (an imported model's too)")
    p.add_argument("--pairs", type=int, default=200_000, help="training pairs to learn from at most (default 200000)")
    p.add_argument(
        "--per-source", type=int, default=PER_SOURCE, help=f"targets kept per source piece (default {PER_SOURCE})"
    )
    p.add_argument(
        "--frequent",
        type=int,
        default=FREQUENT,
        help=f"most frequent target pieces, always allowed (default {FREQUENT})",
    )
    p.add_argument("--src", metavar="FILE", help="source sentences, one a line (with --tgt)")
    p.add_argument("--tgt", metavar="FILE", help="their translations, line for line")
    p.add_argument("--corpus", action="append", metavar="NAME", help="a catalog corpus to learn from (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="which pairs are drawn where there are more (default 0)")
    args = p.parse_args(argv)
    if bool(args.src) != bool(args.tgt):
        p.error("give both --src and --tgt, or neither")
    if args.src and args.corpus:
        p.error("give --src/--tgt or --corpus, not both")
    if min(args.pairs, args.per_source) < 1 or args.frequent < 0:
        p.error("--pairs and --per-source must be positive, --frequent 0 or more")
    return args


def pairs_of(args, cfg) -> tuple[list[str], list[str]]:
    if args.src:
        for path in (args.src, args.tgt):
            if not Path(path).is_file():
                raise UserError(f"{path}: no such file")
        return drawn(read_lines(Path(args.src)), read_lines(Path(args.tgt)), args.pairs, args.seed)
    return training_pairs(cfg, args.pairs, args.corpus, args.seed, log=sys.stderr)


@cli_entry
def main(argv=None):
    args = parse_args(argv)
    from mt.inference.loading import load_run

    started = time.monotonic()
    cfg, tokenizer, _ = load_run(args.run_dir)
    if cfg.model.arch != "transformer":
        raise UserError(f"{args.run_dir} holds a {cfg.model.arch} language model; a shortlist is for translation")
    sources, targets = pairs_of(args, cfg)
    print(f"encoding {len(sources):,} pairs", file=sys.stderr)
    src_ids, tgt_ids = tokenizer.encode_batch(sources), tokenizer.encode_batch(targets, "tgt")
    vocab = tokenizer.vocab_size
    with tqdm(total=len(sources), unit="pair", desc="shortlist", dynamic_ncols=True, file=sys.stderr) as bar:
        shortlist = learn_shortlist(
            src_ids, tgt_ids, vocab, vocab, tokenizer.fingerprint(), args.per_source, args.frequent, bar.update
        )
    run_dir = Path(args.run_dir)
    path = shortlist.save(run_dir.parent if run_dir.is_file() else run_dir)
    print(
        f"shortlist of {args.per_source} targets per source piece and {args.frequent} frequent ones, from "
        f"{len(sources):,} pairs in {time.monotonic() - started:.0f} s: {path} (--no-shortlist turns it off)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()

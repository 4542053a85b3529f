"""python -m mt.score --model DIR --src FILE --tgt FILE [--format tsv|jsonl]

Forced decoding: for each line pair, the model's log-probability of the given target given the
source (<END> included), in total and per token, one line per pair in input order. Useful to
rerank n-best lists, filter noisy parallel data, or ask how likely a reference is.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mt.errors import UserError, cli_entry
from mt.files import read_lines
from mt.flags import add_model_args, add_scoring_arg, open_translator


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m mt.score",
        description="Score given translations with a trained model: log-probabilities normalised as the run's "
        "decode.scoring says (gnmt: a softmax over every piece but <pad> and <START>; marian: transformers' "
        "log-softmax over the whole vocabulary, as an imported model's authors score), or as --scoring says.",
    )
    p.add_argument("--src", required=True, help="source sentences, one per line")
    p.add_argument("--tgt", required=True, help="translations to score, line-aligned with --src")
    p.add_argument(
        "--format",
        choices=["tsv", "jsonl"],
        default="tsv",
        help="tsv: total log-probability, per-token log-probability, tokens (default); jsonl: one object per pair",
    )
    add_model_args(p, engines=False)
    add_scoring_arg(p)
    args = p.parse_args(argv)
    src, tgt = read_lines(Path(args.src)), read_lines(Path(args.tgt))
    if len(src) != len(tgt):
        raise UserError(
            f"{args.src} has {len(src)} lines but {args.tgt} has {len(tgt)}; the files must be line-aligned"
        )
    translator = open_translator(args)
    for index, (total, tokens) in enumerate(translator.score(src, tgt, args.batch_size, args.scoring)):
        if args.format == "tsv":
            sys.stdout.write(f"{total:.4f}\t{total / tokens:.4f}\t{tokens}\n")
        else:
            sys.stdout.write(
                json.dumps(
                    {
                        "index": index,
                        "logprob": round(total, 4),
                        "per_token": round(total / tokens, 4),
                        "tokens": tokens,
                    }
                )
                + "\n"
            )


if __name__ == "__main__":
    main()

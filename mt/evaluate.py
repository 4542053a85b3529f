"""python -m mt.evaluate [--model DIR] [--split test|valid] [--src FILE --ref FILE] [decoding options] [--json]

Translates a test set and scores it with sacreBLEU (BLEU and chrF, detokenized, against the raw
references). The hypotheses are written into the run directory.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from mt.data.corpora import columns, load_pairs
from mt.errors import UserError, cli_entry
from mt.files import read_lines
from mt.flags import add_decoding_args, add_model_args, from_args, open_translator
from mt.inference.documents import translate_lines
from mt.inference.metrics import corpus_scores
from mt.inference.translator import DEFAULT_MODEL


def load_test_set(args, cfg) -> tuple[list[str], list[str], str]:
    if args.src or args.ref:
        if not (args.src and args.ref):
            raise UserError("--src and --ref go together")
        src, ref = read_lines(Path(args.src)), read_lines(Path(args.ref))
        if len(src) != len(ref):
            raise UserError(f"{args.src} has {len(src)} lines but {args.ref} has {len(ref)}")
        if not src:
            raise UserError(f"{args.src} holds no sentences to score")
        return src, ref, Path(args.src).stem
    spec = cfg.data.test if args.split == "test" else cfg.data.valid
    spec = spec[0] if isinstance(spec, list) and spec else spec  # several sets: the first (primary) one
    if not spec:
        raise UserError(f"the run's recipe names no data.{args.split} set; pass --src FILE --ref FILE")
    src, ref = columns(load_pairs(spec, args.split, cfg.data.src_lang, cfg.data.tgt_lang), "src", "tgt")
    return src, ref, args.split


def decoding_name(options, engine: str, quantize: str | None) -> str:
    """A short label for the decoding used, e.g. 'greedy', 'beam5', 'int8-sample', 'ctranslate2-beam5'."""
    prefix = "ctranslate2-" if engine == "ctranslate2" else f"{quantize}-" if quantize else ""
    return prefix + options.name


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m mt.evaluate", description="Score a trained model with BLEU and chrF.")
    p.add_argument("--split", choices=["test", "valid"], default="test", help="the recipe's test or validation set")
    p.add_argument("--src", help="source file, one sentence per line (instead of --split)")
    p.add_argument("--ref", help="reference translations, line-aligned with --src")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument(
        "--documents",
        action="store_true",
        help="each line a paragraph: cut into sentences, translated, joined back, scored against a "
        "paragraph-level reference (as mt.translate translates text)",
    )
    add_model_args(p)
    add_decoding_args(p)
    args = p.parse_args(argv)
    translator = open_translator(args)
    options = from_args(args, translator.options).replace(n_best=1)
    src, ref, name = load_test_set(args, translator.cfg)
    start = time.perf_counter()
    if args.documents:
        hyp = translate_lines(translator, src, options, args.batch_size).lines
    else:
        hyp = translator.translate(src, options, batch_size=args.batch_size)
    seconds = time.perf_counter() - start
    scores = corpus_scores(hyp, ref)
    method = decoding_name(options, args.engine, args.quantize) + ("-documents" if args.documents else "")
    model = Path((args.model or [DEFAULT_MODEL])[0])
    run_dir = model.parent if model.is_file() else model
    out = run_dir / f"hyp.{name}.{method}.txt"
    out.write_text("".join(h + "\n" for h in hyp), encoding="utf-8")
    result = {
        "bleu": scores["bleu"],
        "chrf": scores["chrf"],
        "signature": scores["signature"],
        "sentences": len(src),
        "seconds": round(seconds, 2),
        "decoding": method,
        "hypotheses": str(out),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{scores['bleu_text']}  ({result['signature']['bleu']})")
        print(f"{scores['chrf_text']}  ({result['signature']['chrf']})")
        print(f"{len(src)} sentences in {seconds:.1f} s ({method}); hypotheses in {out}")


if __name__ == "__main__":
    main()

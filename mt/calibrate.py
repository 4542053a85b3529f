"""python -m mt.calibrate [--model DIR] [--src FILE --ref FILE] [--max-sentences N] [decoding options]

Fits the run's confidence calibrator (mt/inference/confidence.py) and keeps it in the run directory
as confidence.json: the model translates sentences with references (by default the recipe's
validation sets, never its test sets) with the recipe's decoding, and two small regressions learn
what its probabilities and the detectors say of a sentence's chrF and of each word being right.
Training fits one at its end; this command fits one for an older or imported run, or on your own
data. `python -m mt.translate --confidence` then uses it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from mt.checkpoint import run_and_checkpoint
from mt.errors import UserError, cli_entry
from mt.files import read_lines
from mt.flags import add_decoding_args, add_model_args, from_args, open_translator
from mt.inference.calibration import calibrate_run, validation_pairs
from mt.inference.confidence import FILE
from mt.inference.translator import DEFAULT_MODEL


def given_pairs(args) -> tuple[list[str], list[str]]:
    if not (args.src and args.ref):
        raise UserError("--src and --ref go together")
    src, ref = read_lines(Path(args.src)), read_lines(Path(args.ref))
    if len(src) != len(ref):
        raise UserError(f"{args.src} has {len(src)} lines but {args.ref} has {len(ref)}")
    return src, ref


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m mt.calibrate",
        description="Fit a run's confidence calibrator on sentences with references (default: its validation sets).",
    )
    p.add_argument("--src", help="source sentences, one per line (instead of the recipe's validation sets)")
    p.add_argument("--ref", help="their reference translations, line-aligned with --src")
    p.add_argument("--max-sentences", type=int, help="fit on the first N pairs at most")
    add_model_args(p, engines=False)
    add_decoding_args(p)
    args = p.parse_args(argv)
    if args.model and len(args.model) > 1:
        raise UserError("a calibrator belongs to one model: give one --model")
    translator = open_translator(args)
    sources, references = given_pairs(args) if (args.src or args.ref) else validation_pairs(translator.cfg)
    if args.max_sentences is not None:
        if args.max_sentences <= 0:
            raise UserError(f"--max-sentences must be positive, got {args.max_sentences}")
        sources, references = sources[: args.max_sentences], references[: args.max_sentences]
    run = Path((args.model or [DEFAULT_MODEL])[0])
    start = time.perf_counter()
    calibrator = calibrate_run(translator, run, sources, references, from_args(args, translator.options))
    about, (run_dir, _) = calibrator.about, run_and_checkpoint(run)
    print(
        f"confidence calibrator fitted on {about['sentences']} translations in {time.perf_counter() - start:.0f} s "
        f"({about['acceptable_share']:.0%} acceptable at chrF {about['acceptable_chrf']:g}, "
        f"{about['right_word_share']:.0%} of {about['words']} words right); kept in {run_dir / FILE}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()

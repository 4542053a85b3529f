"""Which translator a command uses: mt's own (one run, or several as an ensemble) or an exported
CTranslate2 model. The flags for choosing live here, shared by translate, evaluate and serve."""

from __future__ import annotations

import argparse

from mt.errors import UserError
from mt.translator import DEFAULT_MODEL, Translator


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", action="append", metavar="DIR",
                   help=f"run directory (default {DEFAULT_MODEL}); give it twice or more for an ensemble")
    p.add_argument("--engine", choices=["mt", "ctranslate2"], default="mt",
                   help="ctranslate2: a model written by python -m mt.export (needs the ctranslate2 extra)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences decoded together")
    p.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"])
    p.add_argument("--quantize", choices=["int8"], help="int8 dynamic quantization of the Linear layers (CPU)")


def open_translator(args: argparse.Namespace):
    """The translator the flags name: a Translator, or a CTranslate2Translator with the same calls."""
    if args.batch_size <= 0:
        raise UserError(f"--batch-size must be positive, got {args.batch_size}")
    models = args.model or [DEFAULT_MODEL]
    if args.engine == "ctranslate2":
        if len(models) > 1 or args.quantize:
            raise UserError("--engine ctranslate2 takes one exported model; quantize when exporting (--quantization int8)")
        from mt.ctranslate2_engine import CTranslate2Translator

        return CTranslate2Translator(models[0], "cuda" if args.device == "cuda" else "cpu")
    return Translator.load(models if len(models) > 1 else models[0], args.device, args.quantize)

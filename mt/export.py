"""python -m mt.export --model RUN_DIR --format ctranslate2 --out DIR [--quantization int8]

Writes a trained translation model in another engine's format, with the tokenizer and config, so
that `python -m mt.translate --engine ctranslate2 --model DIR` (or CTranslate2 itself) can use it.
"""

from __future__ import annotations

import argparse

from mt.errors import cli_entry
from mt.inference.translator import DEFAULT_MODEL


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m mt.export", description="Export a trained model for another engine.")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"run directory or checkpoint (default {DEFAULT_MODEL})")
    p.add_argument("--format", choices=["ctranslate2"], default="ctranslate2")
    p.add_argument("--out", required=True, help="a new folder for the exported model")
    p.add_argument(
        "--quantization",
        choices=["int8", "int8_float32", "int16", "float16", "bfloat16"],
        help="store the weights quantized (default: float32)",
    )
    args = p.parse_args(argv)
    from mt.inference.ctranslate2_engine import export

    out = export(args.model, args.out, args.quantization)
    print(f'CTranslate2 model in {out}; try: python -m mt.translate --engine ctranslate2 --model {out} "bonjour"')


if __name__ == "__main__":
    main()

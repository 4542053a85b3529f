"""python -m mt.translate [TEXT ...] [--model DIR] [--beam N | --greedy | --sample ...] [--input FILE] [--output FILE]

Translates the positional texts, else the lines of --input or of standard input: exactly one
output line per input line, in order. The Python API is `Translator.load(run_dir).translate([...])`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mt.decode import check_sampling
from mt.errors import UserError, cli_entry
from mt.files import read_lines, split_lines
from mt.translator import DEFAULT_MODEL, Translator

__all__ = ["Translator", "main"]  # Translator lives in mt.translator; importing it from here still works


def add_decoding_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"run directory (default {DEFAULT_MODEL})")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--beam", type=int, help="beam size (default: the recipe's decode.beam)")
    how.add_argument("--greedy", action="store_true", help="take the most likely token at each step")
    how.add_argument("--sample", action="store_true", help="sample each token")
    p.add_argument("--temperature", type=float, default=1.0, help="with --sample")
    p.add_argument("--top-k", type=int, help="with --sample: only the K most likely tokens")
    p.add_argument("--top-p", type=float, help="with --sample: only the smallest set holding probability P")
    p.add_argument("--seed", type=int, default=0, help="with --sample")
    p.add_argument("--length-penalty", type=float, help="beam search length normalisation (default: the recipe's)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences decoded together")
    p.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"])
    p.add_argument("--quantize", choices=["int8"], help="int8 dynamic quantization of the Linear layers (CPU)")


def decoding_kwargs(args) -> dict:
    if args.batch_size <= 0 or (args.beam is not None and args.beam <= 0):
        raise UserError("--batch-size and --beam must be positive")
    if args.sample and args.temperature <= 0:
        raise UserError("--sample needs --temperature > 0 (use --greedy for the most likely output)")
    check_sampling(args.temperature, args.top_k, args.top_p)
    if args.length_penalty is not None and args.length_penalty < 0:
        raise UserError(f"--length-penalty must be >= 0, got {args.length_penalty}")
    kwargs = {"batch_size": args.batch_size, "length_penalty": args.length_penalty}
    if args.greedy:
        return kwargs | {"beam": 1}
    if args.sample:
        return kwargs | {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed}
    return kwargs | {"beam": args.beam}


def read_input(args) -> list[str]:
    if args.text:
        return list(args.text)
    if args.input:
        return read_lines(Path(args.input))
    return split_lines(sys.stdin.buffer.read(), "standard input")


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m mt.translate", description="Translate sentences with a trained model.")
    p.add_argument("text", nargs="*", help="sentences to translate (else --input, else standard input)")
    p.add_argument("--input", help="file with one sentence per line")
    p.add_argument("--output", help="write translations here instead of standard output")
    add_decoding_args(p)
    args = p.parse_args(argv)
    kwargs = decoding_kwargs(args)
    translator = Translator.load(args.model, args.device, args.quantize)
    lines = read_input(args)
    translations = translator.translate(lines, **kwargs)
    text = "".join(t.replace("\n", " ") + "\n" for t in translations)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()

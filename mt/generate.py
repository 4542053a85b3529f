"""python -m mt.generate [--model DIR] [--prompt TEXT] [--max-new-tokens N] [--temperature T] [--top-k K] [--seed S]

Samples a continuation of the prompt from a trained language model and prints the prompt
followed by it, streaming as it goes. The same seed gives the same text.
"""

from __future__ import annotations

import argparse
import sys

import torch

from mt.data.tokenizer import CharTokenizer
from mt.decode_options import DecodeOptions
from mt.errors import UserError, cli_entry
from mt.inference.generation import generate_lm
from mt.inference.loading import load_run
from mt.runtime import Runtime

DEFAULT_MODEL = "runs/shakespeare_char"


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m mt.generate", description="Sample text from a trained language model.")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"run directory (default {DEFAULT_MODEL})")
    p.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    p.add_argument("--max-new-tokens", type=int, default=500)
    p.add_argument("--temperature", type=float, default=0.8, help="0 picks the most likely token (greedy)")
    p.add_argument("--top-k", type=int, default=None, help="sample only from the K most likely tokens")
    p.add_argument("--top-p", type=float, default=None, help="sample only from the smallest set holding probability P")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"])
    args = p.parse_args(argv)
    if args.max_new_tokens < 0:
        p.error("--max-new-tokens must be >= 0")
    return args


@cli_entry
def main(argv=None):
    args = parse_args(argv)
    DecodeOptions(beam=1, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)  # the one range check
    device = Runtime.for_inference(args.device).device
    hint = "; train one with: python -m mt.train recipes/shakespeare_char.yaml" if args.model == DEFAULT_MODEL else ""
    cfg, tokenizer, model = load_run(args.model, device, hint)
    if cfg.model.arch == "transformer":
        raise UserError(f"{args.model} is a translation model; use python -m mt.translate --model {args.model}")
    if isinstance(tokenizer, CharTokenizer) and (unknown := tokenizer.unknown_chars(args.prompt)):
        raise UserError(f"the prompt has characters the model never saw: {''.join(unknown)!r}; remove them")
    ids = tokenizer.encode(args.prompt)
    if not ids:
        raise UserError("the prompt encodes to no tokens; give at least one character")
    torch.manual_seed(args.seed)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    idx = torch.tensor([ids], dtype=torch.long, device=device)
    out = sys.stdout
    out.write(args.prompt)
    new_ids: list[int] = []
    printed = ""
    for token in generate_lm(model, idx, args.max_new_tokens, args.temperature, args.top_k, args.top_p, generator):
        new_ids.append(token)
        text = tokenizer.decode(new_ids)  # decode the whole tail: subword pieces join with spaces correctly
        out.write(text[len(printed) :])
        out.flush()
        printed = text
    out.write("\n")


if __name__ == "__main__":
    main()

"""python -m mt.translate [TEXT ...] [--model DIR] [--beam N | --greedy | --sample ...] [--input FILE] [--output FILE]

Translates the positional texts, else the lines of --input or of standard input: exactly one
output line per input line, in order. The Python API is `Translator.load(run_dir).translate([...])`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from mt.checkpoint import load_run
from mt.decode import beam_search, greedy_or_sample
from mt.errors import UserError, cli_entry
from mt.hardware import autocast, pick_device
from mt.quantize import quantize_int8
from mt.tokenizer import END

DEFAULT_MODEL = "runs/fr_en"


class Translator:
    """A trained translation model, its tokenizer and decoding settings, loaded from a run directory."""

    def __init__(self, cfg, tokenizer, model, device: torch.device):
        self.cfg, self.tokenizer, self.model, self.device = cfg, tokenizer, model, device
        self.max_src_tokens = model.max_len - 1  # room for the source's <END>

    @classmethod
    def load(cls, run_dir: str | Path = DEFAULT_MODEL, device: str = "cpu", quantize: str | None = None) -> Translator:
        """Load a run directory; quantize="int8" quantizes the Linear layers for CPU inference."""
        hint = "; train one with: python -m mt.train recipes/fr_en.yaml" if str(run_dir) == DEFAULT_MODEL else ""
        device = pick_device(device)
        cfg, tokenizer, model = load_run(run_dir, device, hint)
        if cfg.model.arch != "transformer":
            raise UserError(f"{run_dir} holds a {cfg.model.arch} language model; use python -m mt.generate --model {run_dir}")
        if quantize == "int8":
            model = quantize_int8(model)
        return cls(cfg, tokenizer, model, device)

    def translate(
        self, sentences: list[str], beam: int | None = None, temperature: float = 0.0, top_k: int | None = None,
        top_p: float | None = None, seed: int = 0, batch_size: int = 64, length_penalty: float | None = None,
        use_cache: bool = True,
    ) -> list[str]:
        """Translate `sentences`. beam >= 1: beam search (beam 1 is greedy); beam None and
        temperature > 0: sampling; beam None and temperature 0: greedy. Defaults to the recipe's beam."""
        if beam is None and temperature <= 0:
            beam = self.cfg.decode.beam
        alpha = self.cfg.decode.length_penalty if length_penalty is None else length_penalty
        generator = torch.Generator(device=self.device).manual_seed(seed)
        encoded = self.tokenizer.encode_batch(sentences)
        for i, ids in enumerate(encoded):
            if len(ids) > self.max_src_tokens:
                print(f"warning: line {i + 1} has {len(ids)} tokens; translating its first {self.max_src_tokens}", file=sys.stderr)
                encoded[i] = ids[: self.max_src_tokens]
        outputs = [""] * len(sentences)
        todo = sorted((i for i, ids in enumerate(encoded) if ids), key=lambda i: len(encoded[i]))  # empty in, empty out
        for start in range(0, len(todo), batch_size):
            rows = todo[start : start + batch_size]
            width = len(encoded[rows[-1]]) + 1
            src = torch.zeros(len(rows), width, dtype=torch.long)
            for j, i in enumerate(rows):
                src[j, : len(encoded[i]) + 1] = torch.tensor(encoded[i] + [END])
            src = src.to(self.device)
            with autocast(self.device):
                if beam is not None and beam > 1:
                    ids, _ = beam_search(self.model, src, beam, alpha, use_cache)
                else:  # beam 1 is greedy: the plain loop, without beam search's reordering
                    t = 0.0 if beam == 1 else temperature
                    ids, _ = greedy_or_sample(self.model, src, t, top_k, top_p, generator, use_cache)
            for i, out in zip(rows, ids):
                outputs[i] = self.tokenizer.decode(out)
        return outputs


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
        from mt.parallel_data import read_lines

        return read_lines(Path(args.input))
    data = sys.stdin.buffer.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UserError(f"standard input line {line}: invalid UTF-8") from None
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n") if text else []


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

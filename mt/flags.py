"""The flags several commands share, and what they build: which translator (`--model`, `--engine`,
`--device`, `--quantize`) and how it decodes (`--beam`, `--greedy`, `--sample`, ...)."""

from __future__ import annotations

import argparse
import dataclasses

from mt.decode_options import DecodeOptions
from mt.errors import UserError
from mt.glossary import read_glossary
from mt.inference.confidence import WITHHELD, Trust
from mt.inference.loading import DEFAULT_MODEL
from mt.inference.translator import load_translator


def add_model_args(p: argparse.ArgumentParser, engines: bool = True) -> None:
    """--model, --batch-size, --device; with `engines`, --engine and --quantize too."""
    p.add_argument(
        "--model",
        action="append",
        metavar="DIR",
        help=f"run directory (default {DEFAULT_MODEL}); give it twice or more for an ensemble",
    )
    p.add_argument("--batch-size", type=int, default=64, help="sentences decoded together")
    p.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"])
    p.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16"],
        default="auto",
        help="decoding precision; auto: the run's own (an imported model's checkpoint dtype), else bf16 on CUDA "
        "and fp32 on a CPU",
    )
    if engines:
        p.add_argument(
            "--engine",
            choices=["mt", "ctranslate2"],
            default="mt",
            help="ctranslate2: a model written by python -m mt.export (needs the ctranslate2 extra)",
        )
        p.add_argument("--quantize", choices=["int8"], help="int8 dynamic quantization of the Linear layers (CPU)")
        p.add_argument(
            "--processes",
            type=int,
            default=0,
            metavar="N",
            help="decode in N worker processes, each with a copy of the model on one thread (CPU, --engine mt): "
            "no turns at Python's lock once started (about 2 s), for long work and busy servers; 0: threads (default)",
        )


def open_translator(args: argparse.Namespace, models: list[str] | None = None):
    """The translator the model flags name (see mt.inference.translator.load_translator), or the
    one `models` name (a server's language pair) with the other flags."""
    if args.batch_size <= 0:
        raise UserError(f"--batch-size must be positive, got {args.batch_size}")
    processes, engine = getattr(args, "processes", 0), getattr(args, "engine", "mt")
    if processes < 0:
        raise UserError(f"--processes must be 0 or more, got {processes}")
    if processes and engine != "mt":
        raise UserError("--processes is for --engine mt; CTranslate2 decodes on threads of its own")
    translator = load_translator(
        models or args.model or [DEFAULT_MODEL], engine, args.device, getattr(args, "quantize", None), args.precision
    )
    if processes:
        translator.start_processes(processes)
    return translator


def add_decoding_args(p: argparse.ArgumentParser) -> None:
    """The decoding flags of `translate`, `evaluate` and `serve`; `from_args` turns them into options."""
    how = p.add_mutually_exclusive_group()
    how.add_argument("--beam", type=int, help="beam size (default: the recipe's decode.beam)")
    how.add_argument("--greedy", action="store_true", help="take the most likely token at each step (beam 1)")
    how.add_argument("--sample", action="store_true", help="sample each token (see --temperature, --top-k, --top-p)")
    p.add_argument("--temperature", type=float, help="with --sample (default 1.0)")
    p.add_argument("--top-k", type=int, help="with --sample: only the K most likely tokens")
    p.add_argument("--top-p", type=float, help="with --sample: only the smallest set holding probability P")
    p.add_argument("--seed", type=int, help="with --sample (default 0)")
    p.add_argument("--length-penalty", type=float, help="beam search length normalisation (default: the recipe's)")
    add_scoring_arg(p)
    add_glossary_arg(p)
    p.add_argument("--max-len", type=int, help="most output tokens per sentence (default: twice the source plus 10)")
    p.add_argument("--n-best", type=int, help="print the N best hypotheses per input with their scores (N <= beam)")
    add_shortlist_arg(p)


def add_confidence_args(p: argparse.ArgumentParser) -> None:
    """--min-confidence and --withheld, of `translate` and `serve` (mt/inference/confidence.py)."""
    p.add_argument(
        "--min-confidence",
        type=float,
        metavar="P",
        help="withhold sentences whose confidence (the calibrated probability that the translation is acceptable, "
        "0 to 1) is under P, and count them",
    )
    p.add_argument(
        "--withheld",
        choices=WITHHELD,
        default="source",
        help="what stands in for a withheld sentence: its source text, as it is (default), or nothing",
    )


def trust_of(args: argparse.Namespace, asked: bool = False) -> Trust | None:
    """The Trust the flags ask for: with --min-confidence, or where confidence is `asked` for; else None."""
    if args.min_confidence is None and not asked:
        return None
    return Trust(args.min_confidence, args.withheld)


def add_shortlist_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-shortlist",
        action="store_true",
        help="score the whole vocabulary at each step, even where the run has a shortlist (python -m mt.shortlist)",
    )


def add_scoring_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scoring",
        choices=["gnmt", "marian"],
        help="how beam search divides by length and when it stops, and how scores are normalised: gnmt "
        "(mt's recipes) or marian (as transformers and Marian, for imported models); default: the run's",
    )


def add_glossary_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--glossary",
        metavar="FILE",
        help="terms the translation must use: 'source<TAB>target' a line (target variants as a|b; a term that "
        "is its own target is kept as it is), written by constrained beam search",
    )


def glossary_of(args: argparse.Namespace):
    """The --glossary file read (None without the flag)."""
    return read_glossary(args.glossary) if getattr(args, "glossary", None) else None


def from_args(args: argparse.Namespace, defaults: DecodeOptions) -> DecodeOptions:
    """The options the flags ask for, over the recipe's defaults, checked once as a whole."""
    if (args.temperature is not None or args.top_k is not None or args.top_p is not None) and not args.sample:
        raise UserError("--temperature, --top-k and --top-p go with --sample")
    changes = {
        "length_penalty": args.length_penalty,
        "scoring": args.scoring,
        "max_len": args.max_len,
        "n_best": args.n_best,
        "beam": 1 if args.greedy or args.sample else args.beam,
        "temperature": 0.0 if args.greedy or args.beam else None,
        "shortlist": False if getattr(args, "no_shortlist", False) else None,
    }
    changes["glossary"] = glossary_of(args)
    if changes["glossary"] and args.sample:
        raise UserError("--glossary constrains beam search (and --greedy), not --sample")
    if args.sample:
        temperature = 1.0 if args.temperature is None else args.temperature
        if temperature <= 0:
            raise UserError("--sample needs --temperature > 0 (use --greedy for the most likely output)")
        changes |= {"temperature": temperature, "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed}
    return dataclasses.replace(defaults, **{k: v for k, v in changes.items() if v is not None})

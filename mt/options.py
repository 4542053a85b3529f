"""Decoding options: one frozen dataclass shared by the Python API, the commands, the server and the
recipe's `decode:` section. Adding an option means adding a field here and its check in `_check`.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

from mt.errors import UserError


@dataclass(frozen=True)
class DecodeOptions:
    beam: int = 5  # 1 is greedy
    length_penalty: float = 1.0  # GNMT alpha for beam search; 0 ranks by raw log-probability
    temperature: float = 0.0  # > 0 samples each token (with beam 1)
    top_k: int | None = None  # sampling: only the K most likely tokens
    top_p: float | None = None  # sampling: only the smallest set holding probability P
    seed: int = 0  # sampling
    max_len: int | None = None  # most output tokens; None: twice the source plus 10
    n_best: int = 1  # hypotheses returned per input (at most beam)

    def __post_init__(self):
        _check(self)

    @property
    def sampling(self) -> bool:
        return self.temperature > 0

    @property
    def name(self) -> str:
        """A short label: 'greedy', 'beam5' or 'sample'."""
        return "sample" if self.sampling else "greedy" if self.beam == 1 else f"beam{self.beam}"

    def replace(self, **changes) -> DecodeOptions:
        """A copy with the given (not None) fields changed; a temperature > 0 without a beam means
        sampling, so beam 1."""
        changes = {k: v for k, v in changes.items() if v is not None}
        if changes.get("temperature", 0) > 0 and "beam" not in changes:
            changes["beam"] = 1
        return dataclasses.replace(self, **changes)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(o: DecodeOptions) -> None:
    for name in ("beam", "n_best", "seed"):
        if not _is_int(getattr(o, name)):
            raise UserError(f"{name} must be an integer, got {getattr(o, name)!r}")
    for name in ("length_penalty", "temperature"):
        if not isinstance(getattr(o, name), (int, float)) or isinstance(getattr(o, name), bool):
            raise UserError(f"{name} must be a number, got {getattr(o, name)!r}")
    if o.beam < 1:
        raise UserError(f"beam must be >= 1 (1 is greedy), got {o.beam}")
    if o.length_penalty < 0:
        raise UserError(f"length_penalty must be >= 0, got {o.length_penalty}")
    if o.temperature < 0:
        raise UserError(f"temperature must be >= 0 (0 is greedy), got {o.temperature}")
    if o.top_k is not None and (not _is_int(o.top_k) or o.top_k < 1):
        raise UserError(f"top_k must be a positive number of tokens, got {o.top_k!r}")
    if o.top_p is not None and (not isinstance(o.top_p, (int, float)) or not 0.0 < o.top_p <= 1.0):
        raise UserError(f"top_p must be a probability in (0, 1], got {o.top_p!r}")
    if o.max_len is not None and (not _is_int(o.max_len) or o.max_len < 1):
        raise UserError(f"max_len must be a positive number of tokens, got {o.max_len!r}")
    if o.sampling and o.beam != 1:
        raise UserError(f"sampling (temperature {o.temperature}) picks one token at a time: use beam 1, not {o.beam}")
    if (o.top_k is not None or o.top_p is not None) and not o.sampling:
        raise UserError("top_k and top_p restrict sampling: give a temperature > 0 too")
    if not 1 <= o.n_best <= o.beam:
        raise UserError(f"n_best must be between 1 and the beam size ({o.beam}), got {o.n_best}")


FIELDS = tuple(f.name for f in dataclasses.fields(DecodeOptions))


def from_mapping(values: dict, defaults: DecodeOptions) -> DecodeOptions:
    """Options from a JSON-like mapping (a server request): unknown names are a one-line error."""
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise UserError(f"unknown decoding option(s) {', '.join(unknown)}; valid: {', '.join(FIELDS)}")
    if isinstance(values.get("temperature"), (int, float)) and values["temperature"] > 0 and "beam" not in values:
        values = {**values, "beam": 1}  # asking for sampling implies one token at a time
    return dataclasses.replace(defaults, **values)


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
    p.add_argument("--max-len", type=int, help="most output tokens per sentence (default: twice the source plus 10)")
    p.add_argument("--n-best", type=int, help="print the N best hypotheses per input with their scores (N <= beam)")


def from_args(args: argparse.Namespace, defaults: DecodeOptions) -> DecodeOptions:
    """The options the flags ask for, over the recipe's defaults, checked once as a whole."""
    if (args.temperature is not None or args.top_k is not None or args.top_p is not None) and not args.sample:
        raise UserError("--temperature, --top-k and --top-p go with --sample")
    changes = {"length_penalty": args.length_penalty, "max_len": args.max_len, "n_best": args.n_best,
               "beam": 1 if args.greedy or args.sample else args.beam,
               "temperature": 0.0 if args.greedy or args.beam else None}
    if args.sample:
        temperature = 1.0 if args.temperature is None else args.temperature
        if temperature <= 0:
            raise UserError("--sample needs --temperature > 0 (use --greedy for the most likely output)")
        changes |= {"temperature": temperature, "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed}
    return dataclasses.replace(defaults, **{k: v for k, v in changes.items() if v is not None})

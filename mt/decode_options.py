"""Decoding options: one frozen dataclass shared by the Python API, the commands, the server and the
recipe's `decode:` section, and the one place their ranges are checked. Adding an option means
adding a field here and its check in `_check`; the command flags (mt/flags.py) and the server's
request parser (mt/serving/requests.py) follow.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

from mt.errors import UserError
from mt.glossary import Glossary


@dataclass(frozen=True)
class DecodeOptions:
    """How to decode: the recipe's defaults for translate, evaluate and serve; each takes flags too."""

    beam: int = 5  # 1 is greedy
    length_penalty: float = 1.0  # beam search's length-normalisation exponent (see scoring); 0: raw log-probability
    temperature: float = 0.0  # > 0 samples each token (with beam 1)
    top_k: int | None = None  # sampling: only the K most likely tokens
    top_p: float | None = None  # sampling: only the smallest set holding probability P
    seed: int = 0  # sampling: the same seed gives the same samples
    max_len: int | None = None  # most output tokens; null: twice the source plus 10
    n_best: int = 1  # hypotheses returned per input (at most beam)
    scoring: Literal["gnmt", "marian"] = "gnmt"  # gnmt: mt's recipes; marian: as transformers scores (imports)
    renormalize: bool | None = None  # softmax over the producible tokens only; null: as scoring says (gnmt yes)
    glossary: Glossary | None = None  # terms the output must use (--glossary FILE; a request's "glossary")
    shortlist: bool = True  # CPU: score only the target pieces the source can produce, where the run has a shortlist

    def __post_init__(self):
        _check(self)

    @property
    def sampling(self) -> bool:
        return self.temperature > 0

    @property
    def whole_vocabulary(self) -> bool:
        """Whether log-probabilities come from a softmax over the whole vocabulary, the tokens never
        produced banned after it (transformers without renormalize_logits), rather than before it."""
        return self.scoring == "marian" if self.renormalize is None else not self.renormalize

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
    for name in ("length_penalty", "temperature", "top_p"):
        value = getattr(o, name)
        if name == "top_p" and value is None:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise UserError(f"{name} must be a finite number, got {value!r}")
    if not 1 <= o.beam <= 256:  # more beams never help, and the caches grow with them
        raise UserError(f"beam must be >= 1 (1 is greedy) and <= 256, got {o.beam}")
    if not 0 <= o.length_penalty <= 10:
        raise UserError(f"length_penalty must be between 0 and 10, got {o.length_penalty}")
    if not (o.temperature == 0 or 0.01 <= o.temperature <= 100):  # tinier ones overflow the logits
        raise UserError(f"temperature must be 0 (greedy) or between 0.01 and 100, got {o.temperature}")
    if not 0 <= o.seed < 2**63:
        raise UserError(f"seed must be between 0 and 2**63 - 1, got {o.seed}")
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
    if not isinstance(o.shortlist, bool):
        raise UserError(f"shortlist must be true or false, got {o.shortlist!r}")
    if o.renormalize is not None and not isinstance(o.renormalize, bool):
        raise UserError(f"renormalize must be true, false or null, got {o.renormalize!r}")
    if o.glossary is not None and not isinstance(o.glossary, Glossary):
        raise UserError("glossary must be a Glossary (mt.glossary.read_glossary, Glossary.of) or null")
    if o.glossary and o.sampling:
        raise UserError("a glossary constrains beam search (and greedy decoding), not sampling")
    if o.scoring not in ("gnmt", "marian"):
        raise UserError(f"scoring must be 'gnmt' or 'marian', got {o.scoring!r}")
    if not 1 <= o.n_best <= o.beam:
        raise UserError(f"n_best must be between 1 and the beam size ({o.beam}), got {o.n_best}")


FIELDS = tuple(f.name for f in dataclasses.fields(DecodeOptions))

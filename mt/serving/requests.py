"""What a POST /translate body may hold, checked before any work is done: the sentences and the
decoding options, or the HTTP status and the one-line reason it is refused."""

from __future__ import annotations

import dataclasses

from mt.errors import UserError
from mt.inference.decode_options import FIELDS, DecodeOptions


@dataclasses.dataclass(frozen=True)
class Limits:
    max_sentences: int = 64  # per request
    max_chars: int = 2000  # per sentence
    timeout_s: float = 60.0  # per request, from arrival to answer


def from_mapping(values: dict, defaults: DecodeOptions) -> DecodeOptions:
    """Options from a JSON-like mapping (a server request): unknown names are a one-line error."""
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise UserError(f"unknown decoding option(s) {', '.join(unknown)}; valid: {', '.join(FIELDS)}")
    if isinstance(values.get("temperature"), (int, float)) and values["temperature"] > 0 and "beam" not in values:
        values = {**values, "beam": 1}  # asking for sampling implies one token at a time
    return dataclasses.replace(defaults, **values)


def parse_request(body, limits: Limits, defaults) -> tuple:
    """(sentences, options) from a request body, or (status, message) for a bad one."""
    if not isinstance(body, dict) or "text" not in body:
        return 422, 'the body must be a JSON object with "text": a string or a list of strings'
    text = body["text"]
    sentences = [text] if isinstance(text, str) else text
    if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
        return 422, '"text" must be a string or a list of strings'
    if len(sentences) > limits.max_sentences:
        return 413, f"{len(sentences)} sentences in one request; the limit is {limits.max_sentences} (--max-sentences)"
    for i, s in enumerate(sentences):
        if len(s) > limits.max_chars:
            return 413, f"sentence {i} has {len(s)} characters; the limit is {limits.max_chars} (--max-chars)"
    try:
        options = from_mapping({k: v for k, v in body.items() if k != "text"}, defaults)
    except (UserError, TypeError) as e:
        return 422, str(e)
    return sentences, options

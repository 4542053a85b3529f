"""What a POST /translate body may hold, checked before any work is done: the texts, the decoding
options and whether to cut the texts into sentences ("split", default true), or the HTTP status
and the one-line reason it is refused. The size limits apply to what is translated: the sentences
a text is cut into (`check_sizes`, which the request's budget, mt/serving/budget.py, applies once
they are segmented), each text's lines where it is not split. Before that, the texts' count and
total size bound the work segmentation and tokenization can take."""

from __future__ import annotations

import dataclasses
import json
import re

from mt.decode_options import FIELDS, DecodeOptions
from mt.errors import UserError
from mt.glossary import Glossary


class Refused(Exception):
    """A request the server will not do: its HTTP status and why, in one line (and any headers
    the answer carries, such as a 503's Retry-After)."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


@dataclasses.dataclass(frozen=True)
class Limits:
    """The server's ceilings, each a flag of `mt.serve` and shown by GET /info."""

    max_sentences: int = 64  # per request, after the texts are cut into sentences
    max_chars: int = 2000  # per sentence translated
    timeout_s: float = 60.0  # per request, from arrival to answer
    max_body_bytes: int = 1 << 20  # before any JSON is decoded
    max_depth: int = 16  # nesting of JSON arrays and objects; the documented body needs 2
    max_beam: int = 16  # beam (and so n_best): the cache and the search grow with it
    max_output_len: int = 512  # max_len, the most tokens asked for per output
    max_file_bytes: int = 10 << 20  # an uploaded file, before it is parsed (and what its archive may unpack to)
    max_document_chars: int = 500_000  # the text a document (a file, a page) may hold
    max_terms: int = 256  # glossary terms matched in one request's sentences: each is a constraint to search for
    max_sentence_terms: int = 16  # and in one sentence: the constrained search grows with them
    max_requests: int = 64  # in flight at once: past it, 503 with Retry-After rather than a queue to a 504
    max_documents: int = 8  # documents (files, pages) in work at once, each on a thread of its own


FLAGS = {
    "max_sentences": "--max-sentences",
    "max_chars": "--max-chars",
    "max_body_bytes": "--max-body-bytes",
    "max_depth": "--max-depth",
    "max_beam": "--max-beam",
    "max_output_len": "--max-output-len",
    "max_file_bytes": "--max-file-bytes",
    "max_document_chars": "--max-document-chars",
    "max_terms": "--max-terms",
    "max_sentence_terms": "--max-sentence-terms",
    "max_requests": "--max-requests",
    "max_documents": "--max-documents",
}
MAX_REQUEST_TERMS = 1000  # a request's own glossary terms
NOT_OPTIONS = ("text", "split", "format", "source", "target", "api_key")  # the body's keys that are no decoding option
TEXT_FORMATS = ("text", "html", "xhtml", "markdown", "srt", "vtt")  # what a JSON text may be written in
_STRING = re.compile(rb'"(?:\\.|[^"\\])*"')
_BRACKET = re.compile(rb"[\[\]{}]")


def nesting(raw: bytes) -> int:
    """How deeply JSON arrays and objects nest in `raw`, strings skipped: read before decoding, so a
    body of ten thousand brackets never reaches the (recursive) decoder."""
    depth = deepest = 0
    for m in _BRACKET.finditer(_STRING.sub(b"", raw)):
        depth += 1 if m.group() in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


def decode_body(raw: bytes, limits: Limits):
    """The JSON body, or (status, message) when it is too large, too deep or not JSON."""
    if len(raw) > limits.max_body_bytes:
        return 413, f"the body has {len(raw):,} bytes; the limit is {limits.max_body_bytes:,} (--max-body-bytes)"
    if nesting(raw) > limits.max_depth:
        return 422, f"the body nests deeper than {limits.max_depth} levels (--max-depth)"
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        return 422, f"the body is not valid JSON ({str(e)[:200]})"


def from_mapping(values: dict, defaults: DecodeOptions) -> DecodeOptions:
    """Options from a JSON-like mapping (a server request): unknown names are a one-line error."""
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise UserError(f"unknown decoding option(s) {', '.join(unknown)}; valid: {', '.join(FIELDS)}")
    if isinstance(values.get("temperature"), (int, float)) and values["temperature"] > 0 and "beam" not in values:
        values = {**values, "beam": 1}  # asking for sampling implies one token at a time
    return dataclasses.replace(defaults, **values)


def check_sizes(
    sentences: list[str], limits: Limits, before: int = 0, counted: bool = True, sized: bool = True
) -> tuple[int, str] | None:
    """(413, why) where the request would hold more sentences to translate than the limit (`before`
    of them already charged; `counted` off: a file's, bounded by its characters instead) or one is
    too long (`sized` off: a document's, which are cut to the model)."""
    total = before + len(sentences)
    if counted and total > limits.max_sentences:
        return 413, f"{total} sentences in one request; the limit is {limits.max_sentences} (--max-sentences)"
    for i, s in enumerate(sentences if sized else ()):
        if len(s) > limits.max_chars:
            return 413, f"sentence {i} has {len(s)} characters; the limit is {limits.max_chars} (--max-chars)"
    return None


def check_texts(texts: list[str], fmt: str, limits: Limits) -> tuple[int, str] | None:
    """(413, why) where a request's texts are more than its sentences may be (each text is one at
    least: plain text only, a page's count is its own) or hold more characters than those
    sentences may: what bounds the work that segmenting, detecting and tokenizing take before the
    sentences are known and charged."""
    if fmt == "text" and len(texts) > limits.max_sentences:
        return (
            413,
            f"{len(texts)} texts in one request; the limit is {limits.max_sentences} sentences (--max-sentences)",
        )
    bound = limits.max_sentences * (limits.max_chars + 1) if fmt == "text" else limits.max_document_chars
    if (chars := sum(map(len, texts))) > bound:
        flags = "--max-sentences sentences of --max-chars" if fmt == "text" else "--max-document-chars"
        return 413, f"the texts hold {chars:,} characters; the limit is {bound:,} ({flags})"
    return None


def parse_request(body, limits: Limits, defaults) -> tuple:
    """(texts, options, split, format) from a request body, or (status, message) for a bad one. The
    sentences are checked for size once segmented (the budget's `check_sizes`); here the texts'
    count and total size are, and n-best texts, which are translated as given."""
    if not isinstance(body, dict) or "text" not in body:
        return 422, 'the body must be a JSON object with "text": a string or a list of strings'
    text = body["text"]
    sentences = [text] if isinstance(text, str) else text
    if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
        return 422, '"text" must be a string or a list of strings'
    split = body.get("split", True)
    if not isinstance(split, bool):
        return 422, f'"split" must be true or false, got {split!r}'
    fmt = body.get("format", "text")
    if fmt not in TEXT_FORMATS:
        return 422, f'"format" must be one of {", ".join(TEXT_FORMATS)}, got {fmt!r} (files: POST /translate_file)'
    n_best = isinstance(body.get("n_best"), int) and body["n_best"] > 1  # n-best: one sentence a text, as given
    if fmt != "text" and n_best:
        return 422, f"n_best lists are for plain text, not {fmt}"
    if fmt == "text" and (len(sentences) > limits.max_sentences or n_best):
        if refused := check_sizes(sentences, limits):
            return refused
    if refused := check_texts(sentences, fmt, limits):
        return refused
    split = split and not n_best
    ceilings = {
        "beam": (limits.max_beam, "--max-beam"),
        "n_best": (limits.max_beam, "--max-beam"),
        "max_len": (limits.max_output_len, "--max-output-len"),
    }
    for name, (ceiling, flag) in ceilings.items():
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > ceiling:
            return 422, f"{name} {value} is over the server's ceiling of {ceiling} ({flag})"
    try:
        values = {k: v for k, v in body.items() if k not in NOT_OPTIONS}
        if "glossary" in values:  # [[source, target], ...]: the request's terms, over the server's own
            values["glossary"] = with_terms(defaults.glossary, values["glossary"])
        options = from_mapping(values, defaults)
    except (UserError, TypeError) as e:
        return 422, str(e)
    if options.max_len is not None and options.max_len > limits.max_output_len:  # the run's own default
        options = dataclasses.replace(options, max_len=limits.max_output_len)
    return sentences, options, split, fmt


def shown(options: DecodeOptions) -> dict:
    """Decoding options as an answer shows them: a glossary by its number of terms."""
    out = dataclasses.asdict(dataclasses.replace(options, glossary=None))
    return out | {"glossary": {"terms": len(options.glossary)} if options.glossary else None}


def with_terms(glossary: Glossary | None, pairs) -> Glossary | None:
    """A glossary with a request's [source, target] pairs added (the request's win a source they share)."""
    if pairs is None:
        return glossary
    if not isinstance(pairs, list) or len(pairs) > MAX_REQUEST_TERMS:
        raise UserError(f'"glossary" must be a list of at most {MAX_REQUEST_TERMS} [source, target] pairs')
    requested = Glossary.of(pairs)  # checked on its own: its errors name the request's entries
    if glossary is None:
        return requested
    return Glossary.of([(t.source, "|".join(t.targets)) for t in glossary.terms + requested.terms])


def language_fields(body) -> tuple[str | None, str | None]:
    """A body's "source" and "target" (None where absent), or (status, message) where not strings."""
    values = [body.get(key) if isinstance(body, dict) else None for key in ("source", "target")]
    if any(v is not None and not isinstance(v, str) for v in values):
        return 422, '"source" and "target" must be language codes such as "fr"'
    return values[0], values[1]


async def read_capped(request, cap: int, flag: str = "--max-file-bytes", slack: int = 65536) -> bytes:
    """A request's body, refused (413) past `cap` bytes (and `slack`, multipart's own bytes around
    a file): by its Content-Length before reading, and as it arrives where it gives none."""
    declared = request.headers.get("content-length")
    too_big = f"the body is over {cap:,} bytes ({flag})"
    if declared and declared.isdigit() and int(declared) > cap + slack:
        raise Refused(413, too_big)
    from starlette.requests import ClientDisconnect

    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > cap + slack:
                raise Refused(413, too_big)
    except ClientDisconnect:  # no one to answer: a status for the log alone
        raise Refused(400, "the client went away before its body was read") from None
    return bytes(body)


async def form_of(request, body: bytes, **bounds):
    """The form (urlencoded or multipart) in a body already read, parsed within `bounds`
    (Starlette's max_files, max_fields, max_part_size); a malformed one is a 400."""
    from starlette.requests import Request

    async def replay():
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        return await Request(request.scope, replay).form(**bounds)
    except Exception as e:  # noqa: BLE001 - the form parser's many errors, said to the client
        raise Refused(400, f"Invalid request: not a form this server can read ({str(e)[:160]})") from None


async def uploaded_file(request, body: bytes, limits: Limits):
    """The multipart form of an upload already read (`read_capped`), with its "file" part checked."""
    form = await form_of(request, body, max_files=1, max_fields=16, max_part_size=64 * 1024)
    upload = form.get("file")
    if upload is None or not hasattr(upload, "read"):
        raise Refused(400, 'the form needs its file in a part named "file"')
    if upload.size is not None and upload.size > limits.max_file_bytes:
        raise Refused(
            413, f"the file has {upload.size:,} bytes; the limit is {limits.max_file_bytes:,} (--max-file-bytes)"
        )
    return form


def client_of(request) -> str:
    """Who sent a request, for the rate limit: its address."""
    return request.client.host if request.client else "unknown"


def attachment(name: str) -> dict:
    """The header that offers a file for download under `name` (RFC 6266: any characters, with an
    ASCII stand-in for old clients)."""
    from urllib.parse import quote

    plain = re.sub(r"[^\w.-]", "_", name.encode("ascii", "replace").decode()) or "document"
    return {"content-disposition": f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name)}"}

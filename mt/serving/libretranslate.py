"""LibreTranslate's HTTP API, as LibreTranslate's own server defines it, in front of mt's service, so
that its clients (browser extensions, CMS plugins, `libretranslatepy`) work with mt's models:

- POST /translate: `q` (a string, or in JSON a list), `source` (a code or `auto`), `target`,
  `format` (text or html), `alternatives`, `api_key` (and mt's `glossary`, [[source, target], ...],
  an extension); in JSON, form data or the query string. The
  answer is `translatedText` shaped as `q` was, with `detectedLanguage` for auto (one per item of
  a list, where LibreTranslate detects once for the whole batch) and `alternatives` when asked.
- POST /detect, GET /languages, GET /frontend/settings, POST /translate_file with GET
  /download_file/NAME, and POST /suggest (off: 403).
- Errors are {"error": ...} with LibreTranslate's statuses (400, 403, 429, 500) and its messages
  where it has one; every answer carries its open CORS headers.

mt's own API shares POST /translate and POST /translate_file: a request is LibreTranslate's when it
comes as a form or names `q`, `source` or `target` without mt's `text` (a file upload: when it
carries `api_key`, as LibreTranslate's page sends, or asks for JSON). Statuses mt's service gives
that LibreTranslate has not (413, 422, 503, 504) are said as LibreTranslate would, 400 or 500.
"""

# No `from __future__ import annotations` here: FastAPI reads the `Request` annotations of the routes at run time.
import asyncio
import json
import re
import time
import uuid
from pathlib import Path

from mt.errors import UserError
from mt.formats import EXTENSIONS
from mt.languages import detect_ranked, name_of
from mt.serving.admission import received
from mt.serving.requests import Limits, Refused, check_texts, client_of, form_of, nesting, with_terms
from mt.serving.service import Counted, Pair, Service

CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Headers": "Authorization, Content-Type",
    "Access-Control-Expose-Headers": "Authorization",
    "Access-Control-Allow-Methods": "GET, POST",
    "Access-Control-Allow-Credentials": "true",
    "Access-Control-Max-Age": "1728000",
}
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")
KEEP_FILES_S = 30 * 60  # translated files wait this long to be downloaded, as LibreTranslate's do
KEEP_FILES = 200  # and at most this many wait at once: the oldest go first


def _content_type(request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def speaks_libretranslate(request, raw: bytes, limits: Limits) -> bool:
    """Whether a POST /translate is LibreTranslate's: a form, a `q` in the query string, or a JSON
    object that names `q`, `source` or `target` and not mt's `text` (a body too deep to read is
    left to mt's API, which refuses it)."""
    if _content_type(request) in FORMS or "q" in request.query_params:
        return True
    if raw[:1] != b"{" or nesting(raw) > limits.max_depth:
        return False
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return isinstance(body, dict) and "text" not in body and any(k in body for k in ("q", "source", "target"))


async def fields(request, raw: bytes, limits: Limits) -> dict:
    """A request's parameters as LibreTranslate reads them: a JSON object, or the query string
    and the form (the query string first)."""
    kind = _content_type(request)
    if kind == "application/json" or kind.endswith("+json"):
        if nesting(raw) > limits.max_depth:
            raise Refused(400, f"Invalid JSON format: it nests deeper than {limits.max_depth} levels")
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            raise Refused(400, "Invalid JSON format") from None
        if not isinstance(body, dict):
            raise Refused(400, "Invalid JSON format")
        if _has_surrogates(body):
            raise Refused(400, "Invalid request: a text holds unpaired surrogates (\\ud800-\\udfff), not characters")
        return body
    form = {}
    if kind in FORMS:
        form = _one_each(await form_of(request, raw, max_files=0, max_fields=64))
    return form | _one_each(request.query_params)


def _one_each(values) -> dict:
    """A form's or a query string's fields, each once: `q` given several times is a list of texts
    (as in JSON), any other field given twice is refused rather than one of its values dropped."""
    out = {}
    for name in dict.fromkeys(values.keys()):
        given = [v for v in values.getlist(name) if isinstance(v, str)]
        if name == "q" and len(given) > 1:
            out[name] = given
        elif len(given) > 1:
            raise Refused(400, f"Invalid request: {name} is given {len(given)} times; give it once")
        elif given:
            out[name] = given[0]
    return out


def _has_surrogates(value) -> bool:
    """Whether JSON's escapes put a lone surrogate into any string of `value` (no UTF-8 can say it)."""
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, dict):
        return any(_has_surrogates(k) or _has_surrogates(v) for k, v in value.items())
    return isinstance(value, list) and any(_has_surrogates(v) for v in value)


def _required(values: dict, name: str):
    value = values.get(name)
    if value in (None, "", []):
        raise Refused(400, f"Invalid request: missing {name} parameter")
    return value


def _alternatives(values: dict, limits: Limits) -> int:
    raw = values.get("alternatives", 0)
    try:
        count = max(0, int(raw))
    except (TypeError, ValueError, OverflowError):
        raise Refused(400, "Invalid request: alternatives parameter is not a number") from None
    if count >= limits.max_beam:
        raise Refused(400, f"Invalid request: alternatives parameter must be <= {limits.max_beam - 1}")
    return count


def _route(service: Service, source: str, target: str) -> Pair | None:
    """The pair from `source` to `target` (None: the same language, which comes back as it is)."""
    for code in (source, target):
        if code not in service.languages():
            raise Refused(400, f"{code} is not supported")
    if source == target:
        return None
    if (source, target) not in service.pairs:
        held = ", ".join(p.name for p in service.pairs.values())
        raise Refused(400, f"{name_of(target)} ({target}) is not available as a target language from "
                           f"{name_of(source)} ({source}); this server translates {held}")  # fmt: skip
    return service.pairs[(source, target)]


async def _count_group(service: Service, pair: Pair | None, texts: list[str], fmt: str, alternatives: int, ask):
    """Texts of one source language charged to the request's budget, nothing decoded: its `decode`
    gives (translations, alternatives of each). Alternatives come from n-best lists, which take a
    text as one sentence: a text longer than the model takes, or of several lines, is translated
    whole without them. `ask`: the request's glossary terms, budget and limits."""
    none = [[] for _ in texts]
    if pair is None:  # the target's own language: given back as it is
        return Counted(lambda: _ready((texts, none, [1.0] * len(texts))))
    terms, budget, limits, threads = ask
    glossary = _glossary(pair.translator.options.glossary, terms, limits)
    options, limit = pair.translator.options.replace(glossary=glossary), pair.translator.max_src_tokens
    if fmt == "html":
        pages = await service.count_pages(pair, texts, "html", options, budget, threads)
        return Counted(lambda: _paired(pages.decode(), none, [None] * len(texts)), pages.drop)
    encode = pair.translator.tokenizer.encode_batch
    counts = await budget.within(asyncio.to_thread(encode, texts)) if alternatives else [[]] * len(texts)
    fits = [bool(alternatives) and "\n" not in t and len(c) <= limit for t, c in zip(texts, counts)]
    whole, short = [i for i, f in enumerate(fits) if not f], [i for i, f in enumerate(fits) if f]
    n_best = options.replace(beam=max(options.beam, alternatives + 1), n_best=alternatives + 1)
    parts = [
        (rows, await service.count_texts(pair, [texts[i] for i in rows], o, True, budget))
        for rows, o in ((whole, options), (short, n_best))
        if rows
    ]

    async def decode():
        out, others, sure = list(texts), [[] for _ in texts], [None] * len(texts)
        for rows, part in parts:
            best, found, judged = await part.decode()
            for j, i in enumerate(rows):
                out[i], sure[i] = best[j], round(min((c.score for _, c in judged[j]), default=1.0), 4)
                if found is not None:
                    others[i] = list(dict.fromkeys(h.text for h in found[j][1:] if h.text and h.text != best[j]))
        return out, others, sure

    return Counted(decode)


async def _ready(value):
    return value


async def _paired(work, *others):
    return await work, *others


async def translate(service: Service, request, raw: bytes, limits: Limits, budget=None) -> dict:
    """POST /translate, LibreTranslate's way: the rate limit is charged a text at a time, once the
    request is known to be well formed; every group's sentences are charged before any is decoded."""
    budget = budget or service.budget()
    service.available()
    values = await fields(request, raw, limits)
    q, source, target = _required(values, "q"), _required(values, "source"), _required(values, "target")
    alternatives = _alternatives(values, limits)
    batch = isinstance(q, list)
    texts = q if batch else [q]
    if not all(isinstance(t, str) for t in [*texts, source, target]):
        raise Refused(400, "Invalid request: q, source and target must be strings (q may be a list of them)")
    if _content_type(request) in FORMS:
        texts = ["\n".join(t.splitlines()) for t in texts]
    source, target = source.lower(), target.lower()
    _route(service, target if source == "auto" else source, target)  # the languages exist: said before any work
    fmt = values.get("format") or "text"
    if fmt not in ("text", "html"):
        raise Refused(400, f"{fmt} format is not supported")
    service.admit(values.get("api_key"), client_of(request), len(texts))
    if refused := check_texts(texts, fmt, limits):  # sized before detection or tokenizing touch them
        raise Refused(*refused)
    detected = await budget.within(asyncio.to_thread(_detected, service, texts)) if source == "auto" else None
    sources = [d["language"] for d in detected] if detected else [source] * len(texts)
    groups = {code: [i for i, s in enumerate(sources) if s == code] for code in dict.fromkeys(sources)}
    # pages of every language group hold their threads together: reserved at once for the request
    threads = service.admission.documents(sum(s != target for s in sources)) if fmt == "html" else None
    try:
        out, alts, sure = await _translate_groups(
            service, groups, texts, target, fmt, alternatives, (values.get("glossary"), budget, limits, threads)
        )
    finally:
        if threads is not None:
            threads.release()
    answer = {"translatedText": out if batch else out[0]}
    if fmt == "text":  # mt's own field, which LibreTranslate's clients pass over: the least sure sentence's
        answer["confidence"] = sure if batch else sure[0]
    if detected:
        answer["detectedLanguage"] = detected if batch else detected[0]
    if alternatives:
        answer["alternatives"] = alts if batch else alts[0]
    return answer


async def _translate_groups(
    service: Service, groups: dict, texts: list[str], target: str, fmt: str, alternatives: int, ask
):
    """Each source language's texts (`groups`: code -> rows), batched together: every group charged
    first, then each decoded; (translations, alternatives, confidences) in the texts' order."""
    out, alts, sure, counted = [None] * len(texts), [None] * len(texts), [None] * len(texts), []
    try:
        for code, rows in groups.items():
            pair = _route(service, code, target)
            counted.append((rows, await _count_group(service, pair, [texts[i] for i in rows], fmt, alternatives, ask)))
        for rows, group in counted:
            done, others, confidences = await group.decode()
            for i, text, more, confidence in zip(rows, done, others, confidences):
                out[i], alts[i], sure[i] = text, more, confidence
    except BaseException:
        for _, group in counted:
            group.drop()
        raise
    return out, alts, sure


def _glossary(server_glossary, terms, limits: Limits):
    """The server's glossary with a request's `glossary` terms added: in JSON a list of [source,
    target] pairs, in a form the same list as JSON text (an extension of LibreTranslate's API)."""
    if terms in (None, ""):
        return server_glossary
    if isinstance(terms, str) and nesting(terms.encode()) > limits.max_depth:
        raise Refused(400, "Invalid request: glossary: nested too deeply")
    try:
        return with_terms(server_glossary, json.loads(terms) if isinstance(terms, str) else terms)
    except (UserError, ValueError, RecursionError) as e:
        raise Refused(400, f"Invalid request: glossary: {e}") from None


def _detected(service: Service, texts: list[str]) -> list[dict]:
    """Each text's language among those the server translates from, LibreTranslate's way (0-100)."""
    ranked = detect_ranked(texts, service.sources())
    return [{"confidence": float(round(found[0][1] * 100)), "language": found[0][0]} for found in ranked]


async def detect(service: Service, request, raw: bytes, limits: Limits, budget=None):
    """The languages the text is in, with their confidence (0-100), likeliest first; for a list of
    texts one such list for the whole batch, as LibreTranslate's own server answers: each
    language's confidence averaged over the texts, ranked by it weighed by the texts' lengths.
    Sized as a translation's texts are, and detected within the request's deadline."""
    budget = budget or service.budget()
    service.available()
    values = await fields(request, raw, limits)
    q = _required(values, "q")
    texts = q if isinstance(q, list) else [q]
    if not all(isinstance(t, str) for t in texts):
        raise Refused(400, "Invalid request: q must be a string or a list of strings")
    service.admit(values.get("api_key"), client_of(request), len(texts))
    if refused := check_texts(texts, "text", limits):
        raise Refused(*refused)
    found = await budget.within(asyncio.to_thread(detect_ranked, texts, service.sources()))  # off the event loop
    if not isinstance(q, list):
        return [{"confidence": float(round(p * 100)), "language": code} for code, p in found[0][:3]]
    return _averaged(texts, found)


def _averaged(texts: list[str], found: list[list[tuple[str, float]]]) -> list[dict]:
    """One list of candidates for a batch of texts (LibreTranslate's detect_languages): each
    language's mean confidence over the texts, ordered by that mean times the text it was seen in."""
    sums: dict[str, list[float]] = {}
    for text, ranked in zip(texts, found):
        for code, p in ranked:
            seen = sums.setdefault(code, [0.0, 0.0, 0.0])  # confidence, texts, characters
            seen[0], seen[1], seen[2] = seen[0] + p, seen[1] + 1, seen[2] + len(text)
    means = {code: (total / count, chars) for code, (total, count, chars) in sums.items()}
    order = sorted(means, key=lambda code: -means[code][0] * means[code][1])
    return [{"confidence": float(round(means[code][0] * 100)), "language": code} for code in order]


def languages(service: Service) -> list[dict]:
    """Every language the server reads or writes, with the targets it reaches from it (itself included)."""
    service.available()
    out = []
    for code in service.languages():
        targets = sorted({code} | {t for s, t in service.pairs if s == code})
        out.append({"code": code, "name": name_of(code), "targets": targets})
    return out


def settings(service: Service, limits: Limits) -> dict:
    service.available()
    first = next(iter(service.pairs.values()))
    return {
        "apiKeys": service.keys is not None,
        "charLimit": limits.max_chars,
        "filesTranslation": True,
        "frontendTimeout": 500,
        "keyRequired": service.keys is not None,
        "language": {
            "source": {"code": "auto", "name": "Auto Detect"},
            "target": {"code": first.target, "name": name_of(first.target)},
        },
        "suggestions": False,
        "supportedFilesFormat": sorted(EXTENSIONS),
    }


async def translate_file(service: Service, request, form, limits: Limits, budget=None) -> dict:
    """A file translated and kept for download: {"translatedFileUrl": ...}, as LibreTranslate answers."""
    values = {k: v for k, v in form.items() if isinstance(v, str)}
    service.admit(values.get("api_key"), client_of(request))
    upload = form["file"]
    if not upload.filename:
        raise Refused(400, "Invalid request: missing file parameter")
    source, target = _required(values, "source").lower(), _required(values, "target").lower()
    suffix = Path(upload.filename).suffix.lower()
    if suffix not in EXTENSIONS:
        raise Refused(400, "Invalid request: file format not supported")
    if source == "auto":
        reaching = [s for s, t in service.pairs if t == target]
        if len(reaching) != 1:
            raise Refused(400, f"Invalid request: give source for a file; several languages translate to {target}")
        source = reaching[0]
    pair = _route(service, source, target)
    data = await upload.read()
    fmt, options = EXTENSIONS[suffix], pair.translator.options if pair else None
    out = data if pair is None else await service.translate_document(pair, data, fmt, options, upload.filename, budget)
    safe = re.sub(r"[^\w.-]", "_", Path(upload.filename).stem)[:100] or "document"
    name = f"{uuid.uuid4().hex}.{safe}_{target}{suffix}"
    folder = service.downloads()
    _forget_old(folder, keep=KEEP_FILES - 1)
    (folder / name).write_bytes(out)
    return {"translatedFileUrl": f"{request.base_url}download_file/{name}"}


def _forget_old(folder: Path, keep: int = KEEP_FILES) -> None:
    """Translated files past their half hour, and the oldest beyond `keep`, are deleted."""
    files = sorted(folder.iterdir(), key=lambda f: f.stat().st_mtime, reverse=True)
    for i, old in enumerate(files):
        if i >= keep or old.stat().st_mtime < time.time() - KEEP_FILES_S:
            old.unlink(missing_ok=True)


def download(service: Service, filename: str):
    from fastapi.responses import FileResponse

    folder = service.downloads()
    _forget_old(folder)
    path = (folder / filename).resolve()
    if path.parent != folder.resolve() or not re.fullmatch(r"[0-9a-f]{32}\.[\w.-]+", filename):
        raise Refused(400, "Invalid filename")
    if not path.is_file():
        raise Refused(400, "Invalid filename: no such file here (files are kept 30 minutes)")
    return FileResponse(path, filename=filename.split(".", 1)[1])


def add_routes(app, service: Service, limits: Limits) -> None:
    """LibreTranslate's own paths; POST /translate and /translate_file are shared with mt's API."""
    from fastapi import Request

    @app.post("/detect")
    async def detect_route(request: Request):
        request.scope["libretranslate"] = True
        async with received(service, request, limits.max_body_bytes, "--max-body-bytes", 0) as (raw, budget):
            return await detect(service, request, raw, limits, budget)

    @app.get("/languages")
    async def languages_route(request: Request):
        request.scope["libretranslate"] = True
        return languages(service)

    @app.get("/frontend/settings")
    async def settings_route(request: Request):
        request.scope["libretranslate"] = True
        return settings(service, limits)

    @app.get("/download_file/{filename}")
    async def download_route(request: Request, filename: str):
        request.scope["libretranslate"] = True
        service.admit(None, client_of(request), check_key=False)
        return download(service, filename)

    @app.post("/suggest")
    async def suggest_route():
        raise Refused(403, "Suggestions are disabled on this server.")

"""The translation server's FastAPI app: the web page at /, mt's own API (POST /translate, POST
/translate_file, GET /health, GET /info) and LibreTranslate's (mt/serving/libretranslate.py), thin
adapters over one service (mt/serving/service.py), which holds the models by language pair, batches
each model's requests and checks every request (keys, rates, sizes) before any work."""

import argparse
import time
from contextlib import asynccontextmanager
from importlib import resources

from mt import __version__
from mt.data.vocab import without_surrogates
from mt.decode_options import FIELDS
from mt.errors import require_extra
from mt.formats import FORMATS, MEDIA_TYPES, format_of
from mt.serving import libretranslate
from mt.serving.admission import received
from mt.serving.requests import (
    Limits,
    Refused,
    attachment,
    client_of,
    decode_body,
    language_fields,
    parse_request,
    shown,
    uploaded_file,
)
from mt.serving.service import Service


def error(status: int, message: str, headers: dict | None = None):
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=status, headers=headers)


def create_app(args: argparse.Namespace, limits: Limits = Limits()):
    """The app over one service, whose models load in the background once it starts."""
    # No `from __future__ import annotations` here: FastAPI reads the `Request` annotations of the routes at run time.
    fastapi = require_extra("fastapi", "serve", "the server")
    service = Service(model_sets(args), args, limits)

    @asynccontextmanager
    async def lifespan(app):
        service.load_in_background()
        yield
        await service.stop()

    app = fastapi.FastAPI(title="mt translation server", version=__version__, lifespan=lifespan)
    app.state.service = service
    _add_answers(app)
    _add_routes(app, service, args, limits)
    libretranslate.add_routes(app, service, limits)
    return app


def _add_answers(app) -> None:
    """How every answer is shaped: a refusal as {"error": ...} (in LibreTranslate's statuses where
    the request was LibreTranslate's), and LibreTranslate's open CORS headers on each."""
    from fastapi.responses import Response

    @app.exception_handler(Refused)
    async def refused(request, e: Refused):
        status = e.status
        if request.scope.get("libretranslate") and status not in (400, 403, 429, 500):
            # the statuses LibreTranslate's clients know: a full server is its "slow down"
            status = 429 if status == 503 else 500 if status >= 500 else 400
        return error(status, e.message, e.headers)

    @app.middleware("http")
    async def open_cors(request, call_next):
        """Every answer carries LibreTranslate's open CORS headers; a preflight is answered at once."""
        if request.method == "OPTIONS":
            return Response(status_code=200, headers=libretranslate.CORS)
        response = await call_next(request)
        response.headers.update(libretranslate.CORS)
        return response


def _add_routes(app, service: Service, args, limits: Limits) -> None:
    """mt's own paths: the page, /health, /info, POST /translate and /translate_file (the last two
    shared with LibreTranslate's API, which a request's shape chooses)."""
    from fastapi import Request
    from fastapi.responses import HTMLResponse

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return resources.files("mt.serving").joinpath("static/index.html").read_text(encoding="utf-8")

    @app.get("/health")
    async def health():
        service.available()
        return {"status": "ready"}

    @app.get("/info")
    async def info():
        return server_info(service, args)

    @app.post("/translate")
    async def translate(request: Request):
        async with received(service, request, limits.max_body_bytes, "--max-body-bytes", 0, True) as (raw, budget):
            if libretranslate.speaks_libretranslate(request, raw, limits):
                request.scope["libretranslate"] = True
                return await libretranslate.translate(service, request, raw, limits, budget)
            service.available()
            return await answer(service, raw, limits, client_of(request), budget)

    @app.post("/translate_file")
    async def translate_file(request: Request):
        service.available()
        async with received(service, request, limits.max_file_bytes, "--max-file-bytes") as (raw, budget):
            return await file_answer(service, request, raw, limits, budget)


def server_info(service: Service, args) -> dict:
    """GET /info: every pair, and the first pair's keys at the top, as a one-pair server gave them."""
    service.available()
    pairs = service.info()
    totals = {key: sum(p[key] for p in pairs["pairs"]) for key in ("requests_served", "batches_decoded")}
    return (
        pairs["pairs"][0]
        | {
            "engine": args.engine,
            "version": __version__,
            "decoding_options": list(FIELDS),
            "formats": list(FORMATS),
            "api_key_required": service.keys is not None,
        }
        | totals
        | pairs
    )


async def file_answer(service: Service, request, raw: bytes, limits: Limits, budget):
    """POST /translate_file: a file in the multipart field "file" (a format by its name, or the
    "format" field), and optionally "source", "target" and "key": the translated file back, named
    for its target language (LibreTranslate's clients, which send "api_key" or ask for JSON, get its
    answer: a link)."""
    from fastapi.responses import Response

    form = await uploaded_file(request, raw, limits)
    if "api_key" in form or "application/json" in request.headers.get("accept", ""):
        request.scope["libretranslate"] = True
        return await libretranslate.translate_file(service, request, form, limits, budget)
    service.admit(form.get("key"), client_of(request))  # mt's own form names it key: api_key says LibreTranslate
    pair = service.pair(form.get("source") or None, form.get("target") or None)
    fmt = _file_format(form)
    data = await form["file"].read()
    out = await service.translate_document(pair, data, fmt, pair.translator.options, form["file"].filename, budget)
    name = _translated_name(form["file"].filename, pair.target)
    return Response(out, media_type=MEDIA_TYPES[fmt], headers=attachment(name))


def _file_format(form) -> str:
    try:
        return format_of(form["file"].filename, form.get("format") or None)
    except Exception as e:  # noqa: BLE001 - a UserError, said to the client
        raise Refused(400, str(e)) from None


def _translated_name(filename: str, target: str) -> str:
    """page.html -> page.en.html (no path)."""
    base = (filename or "document").replace("\\", "/").rsplit("/", 1)[-1]
    stem, dot, ext = base.rpartition(".")
    return f"{stem}.{target}.{ext}" if dot and stem else f"{base}.{target}"


def model_sets(args) -> list[list[str]]:
    """The runs the server loads, one list a language pair: --model (one run, or an ensemble when
    given twice) and each --pair (its runs joined by commas, for an ensemble)."""
    sets = [args.model] if args.model else []
    sets += [[part for part in pair.split(",") if part] for pair in getattr(args, "pair", None) or []]
    return sets or [["runs/fr_en"]]


async def answer(service: Service, raw: bytes, limits: Limits, client: str = "local", budget=None):
    """The response to one POST /translate body: translations, or a JSON error with its status.
    The rate limit is charged a text at a time, as LibreTranslate's API is."""
    budget = budget or service.budget()
    body = decode_body(raw, limits)
    if isinstance(body, tuple):
        return error(*body)
    key = body.get("api_key") if isinstance(body, dict) else None
    service.admit(key, client, cost=0)  # who asks first: the key, before the body's fields are read
    languages = language_fields(body)
    if isinstance(languages[0], int):
        return error(*languages)
    pair = service.pair(*languages)
    parsed = parse_request(body, limits, pair.translator.options)
    if isinstance(parsed[0], int):
        return error(*parsed)
    texts, options, split, fmt = parsed
    service.admit(key, client, max(1, len(texts)), check_key=False)  # a malformed request costs no rate
    start = time.perf_counter()
    if fmt != "text":
        translations, found, judged = await service.translate_pages(pair, texts, fmt, options, budget), None, None
    else:
        translations, found, judged = await service.translate(pair, texts, options, split, budget)
    result = {
        "translations": translations,
        "seconds": round(time.perf_counter() - start, 4),
        "options": shown(options),
    }
    if found is not None:
        result["n_best"] = [[{"text": h.text, "score": round(h.score, 4)} for h in hyps] for hyps in found]
    if judged is not None:
        result["confidence"] = [text_confidence(sentences) for sentences in judged]
    return result


def text_confidence(sentences: list) -> dict:
    """A text's confidence as the JSON API gives it: its least sure sentence's, and each sentence's
    (mt/inference/confidence.py) with its source, and how many were withheld under --min-confidence."""
    return {
        "confidence": round(min((c.score for _, c in sentences), default=1.0), 4),
        "withheld": sum(c.withheld for _, c in sentences),
        "sentences": [{"source": without_surrogates(s)} | c.to_dict() for s, c in sentences],
    }

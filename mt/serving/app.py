"""The translation server's FastAPI app: the web page at /, POST /translate, GET /health and
GET /info. Requests are checked (mt/serving/requests.py), then batched with others
(mt/serving/request_batcher.py) and decoded on one worker thread."""

import argparse
import asyncio
import dataclasses
import threading
import time
from contextlib import asynccontextmanager
from importlib import resources

from mt import __version__
from mt.decode_options import FIELDS
from mt.errors import UserError, require_extra
from mt.flags import open_translator
from mt.inference.documents import cut_segmented, join_lines, lines_of, segment_lines, texts_of, token_counter
from mt.serving.request_batcher import Batcher
from mt.serving.requests import Limits, check_sizes, decode_body, parse_request


def _error(status: int, message: str):
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=status)


def _load_in_background(app, args) -> None:
    """Load the model on a thread, so /health can answer 'loading' meanwhile."""

    def load():
        try:
            translator = open_translator(args)
            if getattr(args, "scoring", None):  # the server's default, over the run's decode section
                translator.options = translator.options.replace(scoring=args.scoring)
            app.state.translator = translator
        except UserError as e:
            app.state.load_error = str(e)
            print(f"error: {e}", flush=True)

    threading.Thread(target=load, daemon=True).start()


def create_app(args: argparse.Namespace, limits: Limits = Limits()):
    # No `from __future__ import annotations` here: FastAPI reads the `Request` annotation below at run time.
    fastapi = require_extra("fastapi", "serve", "the server")
    from fastapi import Request
    from fastapi.responses import HTMLResponse

    @asynccontextmanager
    async def lifespan(app):
        app.state.translator, app.state.load_error, app.state.batcher = None, None, None
        app.state.long_sentences = 0  # sentences longer than the model takes, translated in pieces
        _load_in_background(app, args)
        yield
        if app.state.batcher:
            await app.state.batcher.stop()
        if hasattr(app.state.translator, "close"):  # worker processes, if --processes started any
            app.state.translator.close()

    app = fastapi.FastAPI(title="mt translation server", version=__version__, lifespan=lifespan)

    def batcher():
        if app.state.batcher is None and app.state.translator is not None:
            app.state.batcher = Batcher(
                app.state.translator, args.batch_wait_ms, args.max_batch_tokens, args.batch_size
            )
            app.state.batcher.start()
        return app.state.batcher

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return resources.files("mt.serving").joinpath("static/index.html").read_text(encoding="utf-8")

    @app.get("/health")
    async def health():
        if app.state.load_error:
            return _error(500, app.state.load_error)
        if app.state.translator is None:
            return _error(503, "loading the model")
        return {"status": "ready"}

    @app.get("/info")
    async def info():
        t = app.state.translator
        if t is None:
            return _error(503, "loading the model")
        b = app.state.batcher
        return model_info(t, args) | {
            "limits": dataclasses.asdict(limits),
            "requests_served": b.requests if b else 0,
            "batches_decoded": b.batches if b else 0,
            "long_sentences_cut": app.state.long_sentences,
        }

    @app.post("/translate")
    async def translate(request: Request):
        if batcher() is None:
            return _error(503, app.state.load_error or "loading the model; try again when GET /health says ready")
        return await answer(app.state, await request.body(), limits)

    return app


async def answer(state, raw: bytes, limits: Limits):
    """The response to one POST /translate body: translations, or a JSON error with its status."""
    body = decode_body(raw, limits)
    if isinstance(body, tuple):
        return _error(*body)
    parsed = parse_request(body, limits, state.translator.options)
    if isinstance(parsed[0], int):
        return _error(*parsed)
    texts, options, split = parsed
    prepared = texts, None, None, 0  # n-best lists: one sentence a text, as given (checked already)
    if options.n_best == 1:  # segmenting and tokenizing take a while on long texts: off the event loop
        prepared = await asyncio.to_thread(prepare, state.translator, texts, split, limits)
        if isinstance(prepared[0], int):
            return _error(*prepared)
    sentences, cuts, counts, long = prepared
    start = time.perf_counter()
    try:
        found = await asyncio.wait_for(state.batcher.translate(sentences, options), limits.timeout_s)
    except (asyncio.TimeoutError, TimeoutError):
        return _error(504, f"no answer within {limits.timeout_s:g} s (--timeout)")
    state.long_sentences += long
    best = [h[0].text for h in found]
    if cuts is not None:
        best = texts_of(join_lines(best, cuts, state.translator.cfg.data.tgt_lang), counts)
    result = {
        "translations": best,
        "seconds": round(time.perf_counter() - start, 4),
        "options": dataclasses.asdict(options),
    }
    if options.n_best > 1:
        result["n_best"] = [[{"text": h.text, "score": round(h.score, 4)} for h in hyps] for hyps in found]
    return result


def prepare(translator, texts: list[str], split: bool, limits: Limits) -> tuple:
    """Texts made ready to translate: their lines (a text's line breaks are kept) cut into
    sentences, the sentences checked against the limits, then cut to the model. Returns (pieces,
    how to join them, lines per text, sentences cut), or (status, why) where a limit refuses them."""
    lines, counts = lines_of(texts)
    segmented = segment_lines(lines, translator.cfg.data.src_lang, split)
    if refused := check_sizes([s for line in segmented for s in line.sentences], limits):
        return refused
    pieces, cuts, _ = cut_segmented(segmented, lines, translator.max_src_tokens, token_counter(translator))
    return pieces, cuts, counts, sum(sum(n > 1 for n in cut.pieces) for cut in cuts)


def model_info(t, args) -> dict:
    models = getattr(t, "models", [])
    return {
        "model": args.model or ["runs/fr_en"],
        "engine": args.engine,
        "version": __version__,
        "source_language": t.cfg.data.src_lang,
        "target_language": t.cfg.data.tgt_lang,
        "parameters": sum(p.numel() for m in models for p in m.parameters()) or None,
        "decoding_defaults": dataclasses.asdict(t.options),
        "decoding_options": list(FIELDS),
    }

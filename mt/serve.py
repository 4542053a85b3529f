"""python -m mt.serve [--model DIR] [--host 127.0.0.1] [--port 8000] [--engine mt|ctranslate2]

A translation server (FastAPI on uvicorn, the `serve` extra): a web page at /, POST /translate,
GET /health and GET /info. Concurrent requests are batched together (see mt/batcher.py). It binds
to loopback unless --host says otherwise; Ctrl-C or SIGTERM finishes the requests in flight, then exits.

    curl -s localhost:8000/translate -H 'content-type: application/json' -d '{"text": "bonjour", "beam": 1}'
"""

import argparse
import asyncio
import dataclasses
import json
import threading
import time
from contextlib import asynccontextmanager
from importlib import resources

from mt import __version__
from mt.batcher import Batcher
from mt.engines import add_model_args, open_translator
from mt.errors import UserError, cli_entry
from mt.options import FIELDS, from_mapping


@dataclasses.dataclass(frozen=True)
class Limits:
    max_sentences: int = 64  # per request
    max_chars: int = 2000  # per sentence
    timeout_s: float = 60.0  # per request, from arrival to answer


def _require():
    try:
        import fastapi
        import uvicorn
    except ImportError:
        raise UserError('the server needs FastAPI and uvicorn, an optional extra: pip install "mt[serve]"') from None
    return fastapi, uvicorn


def _error(status: int, message: str):
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=status)


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


def _load_in_background(app, args) -> None:
    """Load the model on a thread, so /health can answer 'loading' meanwhile."""
    def load():
        try:
            app.state.translator = open_translator(args)
        except UserError as e:
            app.state.load_error = str(e)
            print(f"error: {e}", flush=True)

    threading.Thread(target=load, daemon=True).start()


def create_app(args: argparse.Namespace, limits: Limits = Limits()):
    fastapi, _ = _require()
    from fastapi import Request
    from fastapi.responses import HTMLResponse

    @asynccontextmanager
    async def lifespan(app):
        app.state.translator, app.state.load_error, app.state.batcher = None, None, None
        _load_in_background(app, args)
        yield
        if app.state.batcher:
            await app.state.batcher.stop()

    app = fastapi.FastAPI(title="mt translation server", version=__version__, lifespan=lifespan)

    def batcher():
        if app.state.batcher is None and app.state.translator is not None:
            app.state.batcher = Batcher(app.state.translator, args.batch_wait_ms, args.max_batch_tokens, args.batch_size)
            app.state.batcher.start()
        return app.state.batcher

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return resources.files("mt").joinpath("static/index.html").read_text(encoding="utf-8")

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
        return model_info(t, args) | {"requests_served": b.requests if b else 0, "batches_decoded": b.batches if b else 0}

    @app.post("/translate")
    async def translate(request: Request):
        if batcher() is None:
            return _error(503, app.state.load_error or "loading the model; try again when GET /health says ready")
        return await answer(app.state, await request.body(), limits)

    return app


async def answer(state, raw: bytes, limits: Limits):
    """The response to one POST /translate body: translations, or a JSON error with its status."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return _error(422, f"the body is not valid JSON ({e})")
    parsed = parse_request(body, limits, state.translator.options)
    if isinstance(parsed[0], int):
        return _error(*parsed)
    sentences, options = parsed
    start = time.perf_counter()
    try:
        found = await asyncio.wait_for(state.batcher.translate(sentences, options), limits.timeout_s)
    except (asyncio.TimeoutError, TimeoutError):
        return _error(504, f"no answer within {limits.timeout_s:g} s (--timeout)")
    result = {"translations": [h[0].text for h in found], "seconds": round(time.perf_counter() - start, 4),
              "options": dataclasses.asdict(options)}
    if options.n_best > 1:
        result["n_best"] = [[{"text": h.text, "score": round(h.score, 4)} for h in hyps] for hyps in found]
    return result


def model_info(t, args) -> dict:
    models = getattr(t, "models", [])
    return {
        "model": args.model or ["runs/fr_en"], "engine": args.engine, "version": __version__,
        "source_language": t.cfg.data.src_lang, "target_language": t.cfg.data.tgt_lang,
        "parameters": sum(p.numel() for m in models for p in m.parameters()) or None,
        "decoding_defaults": dataclasses.asdict(t.options), "decoding_options": list(FIELDS),
    }


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m mt.serve", description="Serve translations over HTTP, with a web page.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--batch-wait-ms", type=float, default=5.0, help="how long a request waits for others to batch with")
    p.add_argument("--max-batch-tokens", type=int, default=4096, help="source tokens gathered into one batch at most")
    p.add_argument("--max-sentences", type=int, default=Limits.max_sentences, help="sentences per request at most")
    p.add_argument("--max-chars", type=int, default=Limits.max_chars, help="characters per sentence at most")
    p.add_argument("--timeout", type=float, default=Limits.timeout_s, help="seconds a request may take")
    add_model_args(p)
    return p.parse_args(argv)


@cli_entry
def main(argv=None):
    args = parse_args(argv)
    _, uvicorn = _require()
    if min(args.max_sentences, args.max_chars, args.max_batch_tokens) <= 0 or args.timeout <= 0 or args.batch_wait_ms < 0:
        raise UserError("--max-sentences, --max-chars, --max-batch-tokens and --timeout must be positive")
    app = create_app(args, Limits(args.max_sentences, args.max_chars, args.timeout))
    print(f"mt {__version__}: serving on http://{args.host}:{args.port} (Ctrl-C to stop)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=30)


if __name__ == "__main__":
    main()

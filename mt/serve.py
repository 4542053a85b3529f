"""python -m mt.serve [--model DIR | --pair DIR --pair DIR ...] [--host 127.0.0.1] [--port 8000]

A translation server (FastAPI on uvicorn, the `serve` extra): a web page at /, mt's API (POST
/translate, POST /translate_file, GET /health, GET /info) and LibreTranslate's (POST /translate,
/detect, /translate_file; GET /languages, /frontend/settings), over one or several language pairs.
Concurrent requests are batched per model (see mt/serving/). It binds to loopback unless --host
says otherwise; Ctrl-C or SIGTERM finishes the requests in flight, then exits.

    curl -s localhost:8000/translate -H 'content-type: application/json' -d '{"text": "bonjour", "beam": 1}'
"""

import argparse
import dataclasses
import socket

from mt import __version__
from mt.errors import UserError, cli_entry, require_extra
from mt.flags import add_confidence_args, add_glossary_arg, add_model_args, add_scoring_arg, add_shortlist_arg
from mt.serving.app import create_app
from mt.serving.requests import FLAGS, Limits


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m mt.serve", description="Serve translations over HTTP, with a web page.")
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default loopback; 0.0.0.0 for every interface)"
    )
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--batch-wait-ms", type=float, default=5.0, help="how long a request waits for others to batch with")
    p.add_argument("--max-batch-tokens", type=int, default=4096, help="source tokens gathered into one batch at most")
    helps = {
        "max_sentences": "sentences per request at most",
        "max_chars": "characters per sentence at most",
        "max_body_bytes": "bytes of a request body at most",
        "max_depth": "nesting of a JSON body at most",
        "max_beam": "beam size (and n-best) a request may ask for at most",
        "max_output_len": "max_len a request may ask for at most",
        "max_file_bytes": "bytes of an uploaded file at most",
        "max_document_chars": "characters of text in a document (a file, or a page in a request) at most",
        "max_terms": "glossary terms matched in one request's sentences at most (a file's sentences are bounded by "
        "--max-document-chars, not counted, so its terms are held to --max-sentence-terms a sentence alone)",
        "max_sentence_terms": "glossary terms matched in one sentence at most",
        "max_requests": "requests in flight at once at most: past it, 503 with Retry-After",
        "max_documents": "documents (files, and each page of a request in a format) in work at once at most, "
        "each on a thread of its own: past it, 503 with Retry-After",
    }
    for field, flag in FLAGS.items():
        p.add_argument(flag, type=int, default=getattr(Limits, field), help=helps[field])
    p.add_argument("--timeout", type=float, default=Limits.timeout_s, help="seconds a request may take")
    add_model_args(p)
    p.add_argument(
        "--pair",
        action="append",
        metavar="DIR[,DIR...]",
        help="one more language pair: a run directory (several joined by commas: an ensemble); give it once "
        "per pair, e.g. --pair runs/fr_en --pair runs/en_fr. Requests choose by source and target",
    )
    add_scoring_arg(p)
    add_glossary_arg(p)
    add_shortlist_arg(p)
    add_confidence_args(p)
    p.add_argument(
        "--api-keys",
        metavar="FILE",
        help="require one of the keys in FILE (one a line) with every translation: a missing key is refused "
        "with 400, a wrong one with 403 (default: open)",
    )
    p.add_argument(
        "--rate-limit", type=int, default=0, metavar="N", help="requests a client (its key, else its address) "
        "may make a minute, a request counting one a text; past it, 429, and a request of more texts than N, 413 "
        "(default 0: no limit)",
    )  # fmt: skip
    return p.parse_args(argv)


def listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound before the model loads: a port in use or an address this machine
    does not have is one line at once, where uvicorn would log it after the model had loaded."""
    if not 0 <= port <= 65535:
        raise UserError(f"--port must be between 0 and 65535 (0: any free port), got {port}")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait out TIME_WAIT
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise UserError(
            f"cannot listen on {host} port {port} ({e.strerror or e}); choose another --port or --host"
        ) from None
    return sock


@cli_entry
def main(argv=None):
    args = parse_args(argv)
    uvicorn = require_extra("uvicorn", "serve", "the server")
    limits = Limits(timeout_s=args.timeout, **{field: getattr(args, field) for field in FLAGS})
    if min(*dataclasses.astuple(limits), args.max_batch_tokens) <= 0 or args.batch_wait_ms < 0:
        raise UserError(f"{', '.join(FLAGS.values())}, --max-batch-tokens and --timeout must be positive")
    if args.rate_limit < 0:
        raise UserError(f"--rate-limit must be 0 (no limit) or more, got {args.rate_limit}")
    sock = listen(args.host, args.port)
    app = create_app(args, limits)
    port = sock.getsockname()[1]  # --port 0: the one the system gave
    print(f"mt {__version__}: serving on http://{args.host}:{port} (Ctrl-C to stop)", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=30))
    server.run(sockets=[sock])
    if not server.started:  # the app failed while starting up, and uvicorn has logged why
        raise SystemExit(3)


if __name__ == "__main__":
    main()

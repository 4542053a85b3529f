"""python -m mt.serve [--model DIR] [--host 127.0.0.1] [--port 8000] [--engine mt|ctranslate2]

A translation server (FastAPI on uvicorn, the `serve` extra): a web page at /, POST /translate,
GET /health and GET /info. Concurrent requests are batched together (see mt/serving/). It binds
to loopback unless --host says otherwise; Ctrl-C or SIGTERM finishes the requests in flight, then exits.

    curl -s localhost:8000/translate -H 'content-type: application/json' -d '{"text": "bonjour", "beam": 1}'
"""

import argparse

from mt import __version__
from mt.errors import UserError, cli_entry, require_extra
from mt.flags import add_model_args
from mt.serving.app import create_app
from mt.serving.requests import Limits


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m mt.serve", description="Serve translations over HTTP, with a web page.")
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default loopback; 0.0.0.0 for every interface)"
    )
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
    uvicorn = require_extra("uvicorn", "serve", "the server")
    if (
        min(args.max_sentences, args.max_chars, args.max_batch_tokens) <= 0
        or args.timeout <= 0
        or args.batch_wait_ms < 0
    ):
        raise UserError("--max-sentences, --max-chars, --max-batch-tokens and --timeout must be positive")
    app = create_app(args, Limits(args.max_sentences, args.max_chars, args.timeout))
    print(f"mt {__version__}: serving on http://{args.host}:{args.port} (Ctrl-C to stop)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=30)


if __name__ == "__main__":
    main()

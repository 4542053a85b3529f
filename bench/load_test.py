"""Load test of `python -m mt.serve` on loopback: N concurrent clients send the test set's sentences,
one sentence per request, and the throughput and latency are set against `translate --input`
decoding the same sentences as one file, in the same run.

    python bench/load_test.py --model runs/fr_en                      # 1, 8 and 32 clients, beam 5
    python bench/load_test.py --model runs/fr_en --greedy --clients 1 8
    python bench/load_test.py --model runs/fr_en --server-args "--quantize int8 --processes 2"

Bounded: each level sends the sentences once and stops at --time-limit seconds. Writes
bench/results/load_test.json. Needs the serve extra and the corpus (downloaded, or MT_DATA_MIRROR).
"""

import argparse
import json
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import torch

from mt.data.corpora import columns, load_pairs
from mt.decode_options import DecodeOptions
from mt.hardware import describe
from mt.inference.translator import Translator


def start_server(model: str, flags: list[str]) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mt.serve", "--model", model, "--port", str(port), *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    sys.exit(f"the server did not start: {proc.stderr.read()}")


def load(url: str, sentences: list[str], clients: int, beam: int, time_limit: float) -> dict:
    """Each client takes the next unsent sentence until none are left or time runs out."""
    latencies, errors, lock, cursor = [], [], threading.Lock(), iter(range(len(sentences)))
    deadline = time.monotonic() + time_limit

    def client():
        with httpx.Client(timeout=120) as http:
            while time.monotonic() < deadline:
                with lock:
                    i = next(cursor, None)
                if i is None:
                    return
                start = time.perf_counter()
                r = http.post(f"{url}/translate", json={"text": sentences[i], "beam": beam})
                (latencies if r.status_code == 200 and len(r.json()["translations"]) == 1 else errors).append(
                    time.perf_counter() - start
                )

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    ms = sorted(x * 1000 for x in latencies)
    return {
        "clients": clients,
        "answered": len(latencies),
        "errors": len(errors),
        "seconds": round(seconds, 2),
        "sentences_per_s": round(len(latencies) / seconds, 1),
        "p50_ms": round(statistics.median(ms), 1),
        "p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 1),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="runs/fr_en")
    p.add_argument("--test", default="multi30k:test_2016_flickr")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--greedy", action="store_true", help="beam 1 instead of the recipe's beam")
    p.add_argument("--time-limit", type=float, default=300, help="seconds per level at most")
    p.add_argument("--server-args", default="", help="more flags for mt.serve, e.g. '--quantize int8 --processes 2'")
    args = p.parse_args()
    translator = Translator.load(args.model)
    beam = 1 if args.greedy else translator.options.beam
    cfg = translator.cfg
    sentences = columns(load_pairs(args.test, "test", cfg.data.src_lang, cfg.data.tgt_lang), "src", "tgt")[0]
    start = time.perf_counter()
    translator.translate(sentences, DecodeOptions(beam=beam, length_penalty=translator.options.length_penalty))
    file_seconds = time.perf_counter() - start
    del translator
    proc, url = start_server(args.model, shlex.split(args.server_args))
    try:
        rows = [load(url, sentences, n, beam, args.time_limit) for n in args.clients]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    print(
        f"{len(sentences)} sentences of {args.test}, beam {beam}, one sentence per request, "
        f"mt.serve {args.server_args or '(defaults)'}; "
        f"{describe(torch.device('cpu'))}"
    )
    print(
        f"translate --input (one process, batches of 64): {file_seconds:.1f} s, "
        f"{len(sentences) / file_seconds:.1f} sentences/s"
    )
    print(f"{'clients':>8}{'answered':>10}{'errors':>8}{'sent/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'x file':>8}")
    for r in rows:
        r["vs_file"] = round(r["sentences_per_s"] / (len(sentences) / file_seconds), 2)
        print(
            f"{r['clients']:>8}{r['answered']:>10}{r['errors']:>8}{r['sentences_per_s']:>9.1f}{r['p50_ms']:>9.1f}"
            f"{r['p99_ms']:>9.1f}{r['vs_file']:>8.2f}"
        )
    out = Path("bench/results/load_test.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "model": args.model,
                "test": args.test,
                "beam": beam,
                "server_args": args.server_args,
                "sentences": len(sentences),
                "cpu": describe(torch.device("cpu")),
                "file_seconds": round(file_seconds, 2),
                "rows": rows,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

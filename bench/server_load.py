"""A running `mt.serve` under mixed load: how long plain one-sentence requests take alone and beside
heavy ones (glossary requests at the term limits, pages of HTML), and what one oversized glossary
request costs (a sentence of 280 words, each a term).

    python -m mt.serve --model runs/fr_en --timeout 8 &
    python bench/server_load.py --url http://127.0.0.1:8000 --seconds 30

Prints and writes (--out) the plain requests' p50 and p99 latency in each phase, the heavy requests'
statuses, and the oversized request's status and seconds. Loopback only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

PLAIN = ["un homme en vert tient une guitare", "deux chiens jouent dans la neige", "une femme lit un livre"]
WORDS = (
    "homme femme enfant chien chat rue plage montagne vélo voiture maison arbre fleur ballon guitare livre "
    "chapeau chemise robe table chaise fenêtre porte route pont rivière lac mer ciel soleil neige pluie "
    "cheval vache oiseau poisson bateau train avion bus camion marché magasin restaurant cuisine jardin parc"
).split()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")


def glossary_request(terms: int) -> dict:
    """One sentence holding `terms` glossary terms, one a word, each kept as it is: real words,
    then two-syllable ones, so that 280 of them stay under the default --max-chars."""
    syllables = "ba be bi bo bu da de di do du la le li lo lu ma me mi mo mu".split()
    made = [a + b for a in syllables for b in syllables]
    words = (WORDS + made)[:terms]
    return {"text": " ".join(words), "glossary": [[w, w] for w in words]}


def page_request(sentences: int) -> dict:
    body = "".join(f"<p>{PLAIN[i % len(PLAIN)].capitalize()}.</p>" for i in range(sentences))
    return {"text": f"<html><body>{body}</body></html>", "format": "html"}


def timed(http, url: str, body: dict) -> tuple[int, float]:
    started = time.perf_counter()
    status = http.post(f"{url}/translate", json=body, timeout=120).status_code
    return status, time.perf_counter() - started


def phase(url: str, seconds: float, heavy: list[dict]) -> dict:
    """Plain requests from two clients for `seconds`, with a client per `heavy` body sending it over and over."""
    import httpx

    plain: list[float] = []
    statuses: dict[str, int] = {}
    stop = time.monotonic() + seconds
    lock = threading.Lock()

    def client(bodies: list[dict], record_latency: bool) -> None:
        with httpx.Client() as http:
            i = 0
            while time.monotonic() < stop:
                status, took = timed(http, url, bodies[i % len(bodies)])
                i += 1
                with lock:
                    statuses[str(status)] = statuses.get(str(status), 0) + 1
                    if record_latency and status == 200:
                        plain.append(took)

    plain_bodies = [{"text": s} for s in PLAIN]
    threads = [threading.Thread(target=client, args=(plain_bodies, True)) for _ in range(2)]
    threads += [threading.Thread(target=client, args=([body], False)) for body in heavy]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {
        "plain_requests": len(plain),
        "p50_s": round(percentile(plain, 50), 3),
        "p99_s": round(percentile(plain, 99), 3),
        "mean_s": round(statistics.fmean(plain), 3) if plain else None,
        "statuses": statuses,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--seconds", type=float, default=30, help="length of each load phase")
    p.add_argument("--terms", type=int, default=16, help="terms in each heavy glossary request")
    p.add_argument("--page-sentences", type=int, default=60, help="sentences in each heavy HTML request")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if not args.url.startswith(("http://127.", "http://localhost", "http://[::1]")):
        raise SystemExit("loopback only: the bench sends to a server on this machine")
    import httpx

    with httpx.Client() as http:
        timed(http, args.url, {"text": PLAIN[0]})  # warm
        status, took = timed(http, args.url, glossary_request(280))
        after_status, after = timed(http, args.url, {"text": PLAIN[0]})
    result = {
        "oversized_glossary": {"status": status, "seconds": round(took, 3)},
        "plain_right_after": {"status": after_status, "seconds": round(after, 3)},
        "plain_alone": phase(args.url, args.seconds, []),
        "plain_beside_heavy": phase(
            args.url, args.seconds, [glossary_request(args.terms), page_request(args.page_sentences)]
        ),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

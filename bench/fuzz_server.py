"""Hostile and careless requests against a running `mt.serve`, from a seeded generator: garbage
bytes, deep JSON, wrong types, out-of-range and non-finite options, odd Unicode, many sentences,
and LibreTranslate-shaped ones (JSON and forms, /detect, /languages, files with odd names and
bytes). Counts answers by status; a 5xx, a dropped connection or an answer (other than a file)
that is not JSON is a failure.

    python -m mt.serve --model runs/fr_en &
    python bench/fuzz_server.py --url http://127.0.0.1:8000 --requests 10000 --clients 8

Loopback only; bounded in count and time. Exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from collections import Counter

ODD = ["\ud800", "\udfff", "\x00", "\x1b[31m", "\u202e", "\ufeff", "é" * 50, "🙂" * 10, "\r\n", "\t", "", " "]
OPTIONS = [
    "beam",
    "n_best",
    "max_len",
    "top_k",
    "top_p",
    "temperature",
    "length_penalty",
    "seed",
    "scoring",
    "split",
    "format",
    "glossary",
    "api_key",
    "source",
    "target",
    "bogus",
]
VALUES = [0, 1, 2, 5, -1, 10**9, 2**63, 1.5, float("nan"), float("inf"), -float("inf"), None, True, False, "5", [], {}]
VALUES += ["html", "markdown", "srt", "docx", [["chat", "dog"]], [["chat"]], [[1, 2]], ["k"], "<b>un <i>chat</b>"]


def body(rng: random.Random) -> bytes:
    """One request body: mostly JSON of the right shape with something wrong in it."""
    kind = rng.randrange(8)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
    if kind == 1:
        depth = rng.choice([10, 100, 5000])
        head = rng.choice([b"", b'{"q": ', b'{"text": ', b'{"glossary": '])  # deep inside either API's fields
        return head + (b"[" * depth) + (b"]" * depth if rng.random() < 0.5 else b"")
    pieces = ODD + [
        "le chat noir ",
        "la femme ",
        ". Le chien. ",
        ", ",
        " — ",
        "M. ",
        "?! ",
    ]  # paragraphs and clauses too
    text = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 6 if rng.random() < 0.8 else 120)))
    doc: dict = {"text": text if rng.random() < 0.5 else [text] * rng.choice([1, 3, 200])}
    if kind == 2:
        doc["text"] = rng.choice(VALUES)
    for _ in range(rng.randrange(0, 3)):
        doc[rng.choice(OPTIONS)] = rng.choice(VALUES)
    if kind == 3:
        doc = rng.choice([[doc], "text", 7, None])
    return json.dumps(doc).encode("utf-8", "surrogatepass")


LT_FIELDS = ["q", "source", "target", "format", "alternatives", "api_key", "glossary", "bogus"]
CODES = ["fr", "en", "auto", "de", "", "FR", "zz", "../x", None, 7]
NAMES = ["a.html", "b.docx", "c.epub", "d.srt", "e.md", "f.txt", "g.xyz", "", "../../h.html", "x" * 300 + ".md"]


def libretranslate(rng: random.Random) -> tuple[str, str, dict]:
    """A request of LibreTranslate's API: (method, path, what httpx sends)."""
    kind = rng.randrange(10)
    if kind == 0:
        return (
            "GET",
            rng.choice(["/languages", "/frontend/settings", "/download_file/" + rng.choice(NAMES or ["x"])]),
            {},
        )
    fields: dict = {
        "q": rng.choice([*ODD, "le chat noir", ["le chat", "the dog"], [], None]),
        "source": "fr",
        "target": "en",
    }
    for _ in range(rng.randrange(0, 4)):
        fields[rng.choice(LT_FIELDS)] = rng.choice([*CODES, *VALUES])
    path = "/detect" if kind == 1 else "/translate"
    if kind == 2:  # a file
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 400)))
        if rng.random() < 0.3:
            data = b"PK\x03\x04" + data
        form = {k: str(v) for k, v in fields.items() if k != "q" and isinstance(v, (str, int))}
        return "POST", "/translate_file", {"files": {"file": (rng.choice(NAMES), data)}, "data": form}
    if kind < 6:
        return "POST", path, {"content": json.dumps(fields).encode("utf-8", "surrogatepass"),
                              "headers": {"content-type": "application/json"}}  # fmt: skip
    form = {k: str(v) for k, v in fields.items() if v is not None and not isinstance(v, (list, dict))}
    return (
        "POST",
        path,
        {"data": {k: v.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for k, v in form.items()}},
    )


def request(rng: random.Random) -> tuple[str, str, dict]:
    """mt's API two times in three, LibreTranslate's otherwise."""
    if rng.random() < 2 / 3:
        return "POST", "/translate", {"content": body(rng), "headers": {"content-type": "application/json"}}
    return libretranslate(rng)


def fuzz(url: str, n: int, clients: int, seed: int, deadline_s: float) -> Counter:
    import httpx

    counts: Counter = Counter()
    lock, stop_at = threading.Lock(), time.monotonic() + deadline_s

    def client(k: int) -> None:
        rng = random.Random(seed * 1000 + k)
        with httpx.Client(timeout=60) as http:
            for _ in range(k, n, clients):
                if time.monotonic() > stop_at:
                    return
                method, path, sent = request(rng)
                try:
                    r = http.request(method, f"{url}{path}", **sent)
                    answer = None
                    if r.headers.get("content-type", "").startswith("application/json"):
                        answer = json.loads(r.content)
                    elif r.status_code != 200:  # a file comes back as itself; anything else is JSON
                        raise ValueError
                    outcome = str(r.status_code) + _expected_refusal(r.status_code, answer)
                except httpx.TransportError:
                    outcome = "dropped"
                except ValueError:
                    outcome = "not JSON"
                with lock:
                    counts[outcome] += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return counts


def _expected_refusal(status: int, answer) -> str:
    """' deadline' or ' busy' for a 5xx that says so (the server's deadline, a 504 or LibreTranslate's
    500; a full server's 503), which is not a failure under load, but is counted apart; '' otherwise."""
    error = answer.get("error", "") if isinstance(answer, dict) else ""
    if status >= 500 and "(--timeout)" in error:
        return " deadline"
    if status == 503 and "server is busy" in error:
        return " busy"
    return ""


def failures(counts: Counter) -> int:
    """Answers that are failures: dropped, not JSON, or a 5xx that is not the deadline's or a full server's."""
    return sum(v for k, v in counts.items() if not k[:3].isdigit() or (int(k[:3]) >= 500 and " " not in k))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--requests", type=int, default=10_000)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--minutes", type=float, default=30, help="stop sending after this long")
    args = p.parse_args(argv)
    if not args.url.startswith(("http://127.", "http://localhost", "http://[::1]")):
        raise SystemExit("loopback only: the fuzzer sends to a server on this machine")
    counts = fuzz(args.url, args.requests, args.clients, args.seed, args.minutes * 60)
    print(" ".join(f"{k}: {v}" for k, v in sorted(counts.items())), f"({sum(counts.values())} requests)")
    return 1 if failures(counts) else 0


if __name__ == "__main__":
    sys.exit(main())

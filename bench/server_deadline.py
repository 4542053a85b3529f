"""Does one deadline hold on every path of `mt.serve`? Starts the server itself (loopback, --timeout
8 unless told otherwise), on mt's engine and, with --ctranslate2, on an export of the same run, and
measures:

- a plain one-sentence request sent a second after 16 clients each upload an HTML page of 150
  sentences with inline tags (20 tries: its p50 and p95, and what the uploads were answered);
- every kind of request, each made heavy enough to meet the deadline (text, glossary, page, file
  with tags, LibreTranslate's translate, detect and file): the seconds to its answer, and the
  server's CPU seconds in the second that begins one second after it (idle: none);
- clients that send a heavy request and go away half a second later: the server's CPU after;
- 1,000 glossary terms all beginning with "le" against 64 sentences of 2,000 characters: the
  matching's seconds (in this process, as the budget charges it) and the request's answer;
- then the seeded hostile fuzz (bench/fuzz_server.py): any 5xx but the deadline's or a full
  server's is a failure.

    python bench/server_deadline.py --model runs/fr_en [--ctranslate2] [--tries 20] [--out FILE]

Loopback only; every request loop is bounded in count and time. Writes bench/results/server_deadline.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from fuzz_server import failures, fuzz  # noqa: E402
from load_test import start_server  # noqa: E402

SENTENCE = "Le <b>chat</b> noir dort sur le <i>canapé</i> du salon, près de la fenêtre ouverte."
PLAIN = "Un homme en vert tient une guitare."
CPU_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """The user and system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CPU_TICK


def page(sentences: int) -> str:
    return "<html><body>" + "".join(f"<p>{SENTENCE}</p>" for _ in range(sentences)) + "</body></html>"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")


def plain_beside_documents(url: str, tries: int, uploads: int, timeout: float) -> dict:
    """Each try: `uploads` clients upload a page at once, and a plain request follows a second later."""
    latencies, statuses, lock = [], {}, threading.Lock()

    def upload():
        with httpx.Client(timeout=timeout + 30) as http:
            files = {"file": ("page.html", page(150).encode())}
            status = http.post(f"{url}/translate_file", files=files).status_code
            with lock:
                statuses[str(status)] = statuses.get(str(status), 0) + 1

    for _ in range(tries):
        threads = [threading.Thread(target=upload) for _ in range(uploads)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        started = time.perf_counter()
        answer = httpx.post(f"{url}/translate", json={"text": PLAIN}, timeout=timeout + 30)
        latencies.append(time.perf_counter() - started)
        assert answer.status_code == 200, answer.text
        for t in threads:
            t.join()
    return {
        "tries": tries,
        "p50_s": round(statistics.median(latencies), 3),
        "p95_s": round(percentile(latencies, 95), 3),
        "max_s": round(max(latencies), 3),
        "uploads": statuses,
    }


def heavy_requests(engine: str) -> dict[str, dict]:
    """One request of each kind, each with more work than 8 s allow on two cores."""
    plain = SENTENCE.replace("<b>", "").replace("</b>", "").replace("<i>", "").replace("</i>", "").rstrip(".")
    long_text = ", ".join([plain] * 20)[:1900]  # one sentence of many clauses: cut to the model, not refused
    texts = [f"{long_text} ({i})." for i in range(64)]
    words = [f"mot{i}" for i in range(16)]
    kinds = {
        "text": {"path": "/translate", "json": {"text": texts}},
        "glossary": {
            "path": "/translate",
            "json": {"text": [f"{long_text[:1700]} {' '.join(words)}"] * 16, "glossary": [[w, w] for w in words]},
        },  # fmt: skip
        "page": {"path": "/translate", "json": {"text": page(60), "format": "html"}},
        "file with tags": {"path": "/translate_file", "files": {"file": ("big.html", page(1500).encode())}},
        "libretranslate translate": {
            "path": "/translate",
            "json": {"q": texts, "source": "auto", "target": "en", "alternatives": 3},
        },
        "libretranslate detect": {"path": "/detect", "json": {"q": texts}},
        "libretranslate file": {
            "path": "/translate_file",
            "files": {"file": ("big.html", page(1500).encode())},
            "data": {"source": "fr", "target": "en", "api_key": ""},
        },
    }
    if engine != "mt":
        del kinds["glossary"]  # refused at once: CTranslate2 has no constrained search
    return kinds


def one_kind(url: str, pid: int, body: dict, timeout: float, leave_after: float | None = None) -> dict:
    """A request's answer time (or, with `leave_after`, a client that goes away then), and the
    server's CPU seconds over the second that begins one second after the answer."""
    sent = {k: v for k, v in body.items() if k != "path"}
    started, status = time.perf_counter(), None
    try:
        r = httpx.post(f"{url}{body['path']}", timeout=leave_after or timeout + 30, **sent)
        status = r.status_code
    except httpx.TimeoutException:
        status = "left"
    seconds = time.perf_counter() - started
    time.sleep(1.0)
    before = cpu_seconds(pid)
    time.sleep(1.0)
    return {"status": status, "seconds": round(seconds, 2), "cpu_s_a_second_later": round(cpu_seconds(pid) - before, 3)}


def glossary_matching(url: str, timeout: float) -> dict:
    """1,000 terms, all beginning with "le", none of them in 64 sentences of 2,000 characters."""
    from mt.glossary import Glossary
    from mt.serving.budget import Budget
    from mt.serving.requests import Limits

    words = "le chat de la voisine dort sur le canapé et le chien regarde la rue depuis le balcon".split()
    sentences = [" ".join(words[(i + k) % len(words)] for k in range(400))[:2000] for i in range(64)]
    terms = [[f"le terme{i}", f"term{i}"] for i in range(1000)]
    started = time.perf_counter()
    glossary = Glossary.of(terms)
    Budget(Limits(timeout_s=timeout)).charge(sentences, glossary, sized=False)
    matching = time.perf_counter() - started
    started = time.perf_counter()
    body = {"text": sentences, "glossary": terms, "split": False}
    status = httpx.post(f"{url}/translate", json=body, timeout=timeout + 30).status_code
    return {"matching_s": round(matching, 3), "status": status, "seconds": round(time.perf_counter() - started, 2)}


def hostile_beside(url: str, requests: int) -> dict:
    counts = fuzz(url, requests, clients=4, seed=3, deadline_s=600)
    return {"answers": dict(sorted(counts.items())), "failures": failures(counts)}


def measure(url: str, pid: int, engine: str, args) -> dict:
    result = {"engine": engine}
    if engine == "mt":
        result["plain_beside_documents"] = plain_beside_documents(url, args.tries, 16, args.timeout)
        result["glossary_matching"] = glossary_matching(url, args.timeout)
    kinds = heavy_requests(engine)
    result["every_kind"] = {name: one_kind(url, pid, body, args.timeout) for name, body in kinds.items()}
    result["clients_that_leave"] = {
        name: one_kind(url, pid, kinds[name], args.timeout, leave_after=0.5) for name in ("text", "file with tags")
    }
    result["hostile"] = hostile_beside(url, args.fuzz)
    answered = [r["seconds"] for r in result["every_kind"].values() if r["status"] != "left"]
    result["latest_answer_s"] = max(answered)
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="runs/fr_en")
    p.add_argument("--timeout", type=float, default=8.0)
    p.add_argument("--tries", type=int, default=20, help="plain requests beside uploads")
    p.add_argument("--fuzz", type=int, default=400, help="hostile requests")
    p.add_argument("--ctranslate2", action="store_true", help="also on an export of the run to CTranslate2")
    p.add_argument("--out", type=Path, default=Path("bench/results/server_deadline.json"))
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        engines = [("mt", args.model)]
        if args.ctranslate2:
            export = subprocess.run([sys.executable, "-m", "mt.export", "--model", args.model, "--out", f"{tmp}/ct2"])
            if export.returncode:
                return export.returncode
            engines.append(("ctranslate2", f"{tmp}/ct2"))
        for engine, model in engines:
            proc, url = start_server(model, ["--timeout", str(args.timeout), "--engine", engine])
            try:
                rows.append(measure(url, proc.pid, engine, args))
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
            print(json.dumps(rows[-1], indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"timeout_s": args.timeout, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

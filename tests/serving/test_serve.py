"""The translation server, started for real on a free loopback port: every endpoint and limit,
batching of concurrent requests, a client that goes away, and a clean stop on SIGTERM."""

import json
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import children, cli, running

httpx = pytest.importorskip("httpx", reason="the dev extra is not installed (pip install -e '.[dev]')")
pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'mt[serve]'); .ci/run installs it")


READY_S = 120  # importing torch and loading the model take seconds here, and far longer on a loaded CI machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(run_dir, *flags):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mt.serve", "--model", str(run_dir), "--port", str(port), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"the server did not become ready in {READY_S} s")


@pytest.fixture(scope="module")
def server(run_dir):
    proc, url = start_server(
        run_dir, "--max-sentences", "8", "--max-chars", "200", "--batch-wait-ms", "20", "--max-file-bytes", "20000"
    )
    yield url
    stop(proc)
    assert "serving on http://127.0.0.1:" in proc.stdout.read()  # loopback unless told otherwise


def stop(proc):
    """SIGTERM: uvicorn drains, then ends by the signal it was sent, as servers do; no traceback."""
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
    err = proc.stderr.read()
    assert "Traceback" not in err, err[-3000:]


def post(url, body, **kw):
    return httpx.post(
        f"{url}/translate", content=body if isinstance(body, (bytes, str)) else json.dumps(body), timeout=30, **kw
    )


def test_health_info_and_page(server):
    assert httpx.get(f"{server}/health").json() == {"status": "ready"}
    info = httpx.get(f"{server}/info").json()
    assert info["source_language"] == "fr" and info["target_language"] == "en" and info["parameters"] > 1000
    assert info["decoding_defaults"]["beam"] == 5 and "top_p" in info["decoding_options"]
    page = httpx.get(f"{server}/")
    assert page.status_code == 200 and 'id="translate"' in page.text


def test_translations_come_back_in_order_and_match_the_command(server, run_dir):
    lines = ["le chat noir", "", "le chien blanc", "la femme rouge"]
    answer = post(server, {"text": lines, "beam": 1}).json()
    expected = cli("mt.translate", "--model", str(run_dir), "--greedy", *lines).stdout.split("\n")[:-1]
    assert answer["translations"] == expected and answer["translations"][1] == ""
    assert answer["options"]["beam"] == 1 and answer["seconds"] >= 0
    assert post(server, {"text": "le chat noir"}).json()["translations"] == ["the black cat"]
    nbest = post(server, {"text": ["le chat noir"], "beam": 3, "n_best": 2}).json()["n_best"][0]
    assert len(nbest) == 2 and nbest[0]["score"] >= nbest[1]["score"]


def test_each_text_says_how_sure_it_is_and_a_server_threshold_withholds(server, run_dir):
    answer = post(server, {"text": ["le chat noir\nle chien blanc", ""]}).json()
    first = answer["confidence"][0]
    assert len(first["sentences"]) == 2 and first["withheld"] == 0
    assert first["confidence"] == min(s["confidence"] for s in first["sentences"])
    words = first["sentences"][0]["words"]
    assert [w["word"] for w in words] == answer["translations"][0].split()[: len(words)]
    assert answer["confidence"][1] == {"confidence": 1.0, "withheld": 0, "sentences": []}
    proc, url = start_server(run_dir, "--min-confidence", "1")  # nothing is that sure: all withheld
    try:
        strict = post(url, {"text": ["le chat noir"]}).json()
    finally:
        stop(proc)
    assert strict["translations"] == ["le chat noir"] and strict["confidence"][0]["withheld"] == 1


@pytest.mark.parametrize(
    "body, status, words",
    [
        (b"{not json", 422, "not valid JSON"),
        (b"\xff\xfe", 422, "not valid JSON"),
        ({"txt": "bonjour"}, 422, '"text"'),
        ({"text": 5}, 422, "a string or a list of strings"),
        ({"text": ["a", 5]}, 422, "a string or a list of strings"),
        ({"text": ["le chat"] * 9}, 413, "the limit is 8 (--max-sentences)"),
        ({"text": "x" * 201}, 413, "the limit is 200 (--max-chars)"),
        ({"text": "le chat", "beam": 0}, 422, "beam must be >= 1"),
        ({"text": "le chat", "beem": 2}, 422, "unknown decoding option(s) beem"),
        ({"text": "le chat", "top_k": 0, "temperature": 1}, 422, "top_k must be a positive"),
    ],
)
def test_bad_requests_get_a_json_error_saying_what_is_wrong(server, body, status, words):
    response = post(server, body)
    assert response.status_code == status and words in response.json()["error"]


def test_concurrent_requests_are_batched_and_keep_their_own_options(server):
    before = httpx.get(f"{server}/info").json()
    cases = [({"text": ["le chat noir", "le chien blanc"], "beam": b}) for b in (1, 2, 3)] * 6
    expected = {
        b: post(server, {"text": ["le chat noir", "le chien blanc"], "beam": b}).json()["translations"]
        for b in (1, 2, 3)
    }
    results = [None] * len(cases)

    def ask(i):
        results[i] = post(server, cases[i]).json()

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for case, result in zip(cases, results):
        assert result["translations"] == expected[case["beam"]] and result["options"]["beam"] == case["beam"]
    after = httpx.get(f"{server}/info").json()
    requests = after["requests_served"] - before["requests_served"]
    assert requests == len(cases) + 3 and after["batches_decoded"] - before["batches_decoded"] < requests


def test_a_client_that_goes_away_does_not_stall_the_server(server):
    host, port = server.removeprefix("http://").split(":")
    body = json.dumps({"text": ["le chat noir"] * 8, "beam": 5}).encode()
    for _ in range(3):
        with socket.create_connection((host, int(port))) as s:
            s.sendall(
                b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
    assert post(server, {"text": "le chien blanc", "beam": 1}).json()["translations"] == ["the white dog"]


def test_sigterm_finishes_the_request_in_flight(run_dir):
    proc, url = start_server(run_dir, "--batch-wait-ms", "1500")  # the request waits 1.5 s in the batcher
    answer = {}
    thread = threading.Thread(
        target=lambda: answer.update(r=post(url, {"text": ["le chat noir et le chien blanc"] * 60, "beam": 5}))
    )
    thread.start()
    time.sleep(0.5)
    assert thread.is_alive()  # still waiting for its answer when the signal comes
    proc.send_signal(signal.SIGTERM)
    thread.join(timeout=60)
    assert answer["r"].status_code == 200 and len(answer["r"].json()["translations"]) == 60
    assert proc.wait(timeout=30) in (0, -signal.SIGTERM) and "Traceback" not in proc.stderr.read()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the decoding processes in Linux's /proc")
def test_a_server_with_decoding_processes_answers_alike_and_stops_them(run_dir):
    lines = ["le chat noir", "", "le chien blanc", "la femme rouge"]
    expected = cli("mt.translate", "--model", str(run_dir), "--beam", "3", *lines).stdout.split("\n")[:-1]
    proc, url = start_server(run_dir, "--processes", "2")
    spawned = children(proc.pid)
    assert len(spawned) >= 2  # the decoding processes, and multiprocessing's resource tracker
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(post(url, {"text": lines, "beam": 3}))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert [a.json()["translations"] for a in answers] == [expected] * 4
    stop(proc)
    time.sleep(1)
    assert not [pid for pid in spawned if running(pid)]


def test_bad_server_flags_are_a_one_line_error():
    result = subprocess.run(
        [sys.executable, "-m", "mt.serve", "--max-chars", "0"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "must be positive" in result.stderr


def test_a_port_in_use_or_out_of_range_is_one_line_before_the_model_loads(tmp_path):
    """The socket is bound first: with a model that does not exist, the port is still what is named."""
    no_model = str(tmp_path / "no-model")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        for flags, start in [
            (["--port", str(port)], f"error: cannot listen on 127.0.0.1 port {port} ("),
            (["--port", "70000"], "error: --port must be between 0 and 65535 (0: any free port), got 70000"),
        ]:
            result = subprocess.run(
                [sys.executable, "-m", "mt.serve", "--model", no_model, *flags],
                capture_output=True,
                text=True,
                timeout=60,
            )
            (line,) = result.stderr.strip().splitlines()
            assert result.returncode == 2 and line.startswith(start), result.stderr


def test_port_zero_serves_on_the_port_it_prints(run_dir):
    proc = subprocess.Popen(
        [sys.executable, "-m", "mt.serve", "--model", str(run_dir), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], READY_S)
        assert ready, "no 'serving on' line"
        line = proc.stdout.readline()
        url = line.split("serving on ", 1)[1].split()[0]
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0"), line
        deadline = time.monotonic() + READY_S
        while True:  # the line comes before uvicorn accepts, and the model may still be loading
            try:
                answer = httpx.get(f"{url}/health", timeout=1)
                if answer.status_code == 200:
                    assert answer.json() == {"status": "ready"}
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
    finally:
        stop(proc)


def test_hostile_requests_get_4xx_never_5xx_and_the_server_stays_well(run_dir):
    """A seeded fuzz of a few hundred requests from 4 clients (bench/fuzz_server.py runs it long)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from fuzz_server import failures, fuzz

    proc, url = start_server(run_dir)
    try:
        counts = fuzz(url, n=300, clients=4, seed=1, deadline_s=240)
        assert failures(counts) == 0, counts
        assert sum(v for k, v in counts.items() if k.startswith("4")) > 100, counts  # it did send bad requests
        assert httpx.get(f"{url}/health", timeout=5).json() == {"status": "ready"}
        limits = httpx.get(f"{url}/info", timeout=5).json()["limits"]
        assert limits["max_beam"] == 16 and limits["max_depth"] == 16
    finally:
        stop(proc)  # and no traceback in the log


@pytest.mark.parametrize(
    "raw, status, words",
    [
        (b"[" * 5000, 422, "--max-depth"),
        (json.dumps({"text": "a", "beam": 10**9}).encode(), 422, "--max-beam"),
        (json.dumps({"text": "a", "max_len": 10**6}).encode(), 422, "--max-output-len"),
        (b'{"text": "a", "length_penalty": NaN}', 422, "finite"),
        (b'{"text": "\\ud800 chat"}', 200, None),
        (b'{"text": "x' + b"y" * (2 << 20) + b'"}', 413, "--max-body-bytes"),
    ],
)
def test_each_refusal_names_its_limit(server, raw, status, words):
    r = httpx.post(f"{server}/translate", content=raw, headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == status, r.text
    if words:
        assert words in r.json()["error"]


def test_a_runs_default_output_length_is_held_to_the_servers_ceiling():
    """An imported run decodes up to its checkpoint's max_length by default: the server's
    --max-output-len still bounds what a request costs, and a request over it is refused."""
    from mt.decode_options import DecodeOptions
    from mt.serving.requests import Limits, parse_request

    limits, defaults = Limits(max_output_len=50), DecodeOptions(beam=4, max_len=510, scoring="marian")
    sentences, options, split, fmt = parse_request({"text": "bonjour"}, limits, defaults)
    assert sentences == ["bonjour"] and options.max_len == 50 and options.scoring == "marian" and split
    assert fmt == "text"
    assert parse_request({"text": "bonjour", "max_len": 20}, limits, defaults)[1].max_len == 20
    status, message = parse_request({"text": "bonjour", "max_len": 100}, limits, defaults)
    assert status == 422 and "--max-output-len" in message
    assert parse_request({"text": "x", "scoring": "bogus"}, limits, defaults)[0] == 422


def test_paragraphs_are_cut_into_sentences_and_a_long_one_is_translated_in_full(server):
    """The limits (8 sentences, 200 characters, this server's) apply to the sentences translated:
    a paragraph of four sentences passes, a long sentence is cut at its clauses and counted in
    /info, split false translates each text whole, and a text too big still gets a 413."""
    sentences = ["le chat noir.", "Le chien blanc!", "Le homme rouge ?", "Le petit enfant."]
    paragraph = " ".join(sentences)
    before = httpx.get(f"{server}/info").json()["long_sentences_cut"]
    answer = post(server, {"text": [paragraph, "", "  le chat noir  "], "beam": 1})
    assert answer.status_code == 200, answer.text
    first, empty, spaced = answer.json()["translations"]
    one_by_one = post(server, {"text": sentences, "split": False, "beam": 1}).json()["translations"]
    assert first == " ".join(one_by_one) and empty == "" and spaced.startswith("  the ") and spaced.endswith("  ")
    clauses = ", ".join(["le petit enfant", "le homme rouge"] * 4)  # over 100 tokens: eight clauses to translate
    started = time.monotonic()
    answer = post(server, {"text": clauses, "beam": 1})
    assert answer.status_code == 200 and time.monotonic() - started < 60, answer.text
    assert len(answer.json()["translations"][0]) >= 0.5 * len(clauses)
    assert httpx.get(f"{server}/info").json()["long_sentences_cut"] == before + 1
    whole = post(server, {"text": paragraph, "split": False, "beam": 1})
    assert whole.status_code == 200 and len(whole.json()["translations"]) == 1
    assert post(server, {"text": "x" * 201, "split": False}).status_code == 413  # a text over 200 characters
    assert post(server, {"text": "x" * 201}).status_code == 413  # a sentence over 200 characters
    assert post(server, {"text": " ".join(["Le chat noir."] * 9)}).status_code == 413  # nine sentences
    refused = post(server, {"text": "x", "split": "yes"})
    assert refused.status_code == 422 and "split" in refused.json()["error"]


def test_a_line_break_in_a_text_is_a_line_break_in_its_answer(server):
    answer = post(server, {"text": ["le chat noir\nle chien blanc", "\n  \n", "  "], "beam": 1})
    assert answer.status_code == 200, answer.text
    first, blank, spaces = answer.json()["translations"]
    one_by_one = post(server, {"text": ["le chat noir", "le chien blanc"], "beam": 1}).json()["translations"]
    assert first == "\n".join(one_by_one) and blank == "\n  \n" and spaces == "  "


class SlowTokenizer:
    """Counts tokens by words, 20 ms a call: a tokenizer with real work to do."""

    calls = 0

    def encode(self, text):
        SlowTokenizer.calls += 1
        time.sleep(0.02)
        return text.split()

    def encode_batch(self, texts):
        return [self.encode(t) for t in texts]


def stub_service(limits):
    from types import SimpleNamespace

    from mt.decode_options import DecodeOptions
    from mt.inference.confidence import Confidence
    from mt.inference.search import Hypothesis
    from mt.serving.service import Pair, Service

    async def translate(sentences, options, budget=None):
        return [[Hypothesis(s.upper(), 0.0, [])] for s in sentences]

    translator = SimpleNamespace(
        cfg=SimpleNamespace(data=SimpleNamespace(src_lang="fr", tgt_lang="en")),
        max_src_tokens=100,
        tokenizer=SlowTokenizer(),
        options=DecodeOptions(),
        confidence=lambda sources, best: [Confidence(1.0) for _ in sources],
    )
    service = Service([], SimpleNamespace(), limits)
    service.pairs = {("fr", "en"): Pair("fr", "en", ["stub"], translator, SimpleNamespace(translate=translate))}
    service.ready = True
    return service


def test_sizes_are_checked_before_any_text_is_segmented_or_tokenized(monkeypatch):
    import asyncio

    from mt.serving import app, service
    from mt.serving.requests import Limits

    def no_segmenting(*args, **kwargs):
        raise AssertionError("segmented before the sizes were checked")

    monkeypatch.setattr(service, "segment_lines", no_segmenting)
    limits = Limits(max_sentences=4, max_chars=50)
    body = json.dumps({"text": ["Une phrase courte. " * 12] * 2}).encode()  # 2 texts, more than 4 x 51 characters
    refused = asyncio.run(app.answer(stub_service(limits), body, limits))
    assert refused.status_code == 413 and "--max-sentences" in json.loads(refused.body)["error"]


def test_segmenting_and_tokenizing_leave_the_event_loop_free():
    """A request's texts are cut and counted on a worker thread: the loop goes on answering meanwhile."""
    import asyncio

    from mt.serving import app
    from mt.serving.requests import Limits

    async def scenario():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        beat = asyncio.create_task(ticker())
        body = json.dumps({"text": "Le chat dort. Le chien aboie. Il pleut. Il neige.", "split": True}).encode()
        result = await app.answer(stub_service(Limits()), body, Limits())
        beat.cancel()
        return result, ticks

    SlowTokenizer.calls = 0
    result, ticks = asyncio.run(scenario())
    assert result["translations"] == ["LE CHAT DORT. LE CHIEN ABOIE. IL PLEUT. IL NEIGE."]
    assert SlowTokenizer.calls >= 4 and ticks >= SlowTokenizer.calls  # the loop ticked while the tokenizer worked


def test_a_text_in_a_format_comes_back_in_it(server):
    pytest.importorskip("bs4", reason="the formats extra is not installed (pip install 'mt[formats]')")
    answer = post(server, {"text": ["<p>le <b>chat</b> noir</p>", "*le chien* blanc"], "format": "html", "beam": 1})
    assert answer.status_code == 200, answer.text
    assert answer.json()["translations"][0] == "<p>the black <b>cat</b></p>"
    markdown = post(server, {"text": "le *chat* noir", "format": "markdown", "beam": 1})
    assert markdown.status_code == 200 and markdown.json()["translations"] == ["the black *cat*"], markdown.text
    refused = post(server, {"text": "x", "format": "docx"})
    assert refused.status_code == 422 and "/translate_file" in refused.json()["error"]


def test_a_file_comes_back_translated_and_a_bad_or_big_one_is_refused(server):
    pytest.importorskip("srt", reason="the formats extra is not installed (pip install 'mt[formats]')")
    subtitles = "1\n00:00:01,000 --> 00:00:02,000\nle chat\nnoir\n\n2\n00:00:03,000 --> 00:00:04,500\nle chien blanc\n"
    sent = httpx.post(f"{server}/translate_file", files={"file": ("film.fr.srt", subtitles)}, timeout=60)
    assert sent.status_code == 200, sent.text
    assert sent.headers["content-disposition"].startswith('attachment; filename="film.fr.en.srt"')
    assert sent.text.splitlines()[1:4] == ["00:00:01,000 --> 00:00:02,000", "the black", "cat"]
    bad = httpx.post(f"{server}/translate_file", files={"file": ("report.docx", b"<p>no</p>")}, timeout=30)
    assert bad.status_code == 400 and "not a .docx file" in bad.json()["error"]
    unknown = httpx.post(f"{server}/translate_file", files={"file": ("data.xyz", b"x")}, timeout=30)
    assert unknown.status_code == 400 and "cannot tell the format" in unknown.json()["error"]
    big = httpx.post(f"{server}/translate_file", files={"file": ("big.html", b"<p>x</p>" * 5000)}, timeout=30)
    assert big.status_code == 413 and "--max-file-bytes" in big.json()["error"]
    none = httpx.post(f"{server}/translate_file", data={"text": "x"}, timeout=30)
    assert none.status_code == 400 and '"file"' in none.json()["error"]


def test_texts_in_a_format_are_counted_together_before_any_is_translated(server):
    """Three pages of three sentences are nine: over this server's 8, refused before any decoding,
    as the same sentences as plain text are."""
    page = "<p>Le chat noir. Le chien blanc. La femme rouge.</p>"
    before = httpx.get(f"{server}/info").json()["requests_served"]
    for fmt, text in (("html", page), ("text", "Le chat noir. Le chien blanc. La femme rouge.")):
        refused = post(server, {"text": [text] * 3, "format": fmt, "beam": 1})
        assert refused.status_code == 413 and "--max-sentences" in refused.json()["error"], refused.text
    assert httpx.get(f"{server}/info").json()["requests_served"] == before  # nothing reached the batcher
    assert post(server, {"text": [page] * 2, "format": "html", "beam": 1}).status_code == 200


def test_glossary_terms_past_the_limits_are_refused_at_once(server):
    words = [f"mot{i}" for i in range(17)]
    terms = [[w, "dog"] for w in words]
    refused = post(server, {"text": " ".join(words), "glossary": terms})
    assert refused.status_code == 413 and "--max-sentence-terms" in refused.json()["error"], refused.text
    assert post(server, {"text": " ".join(words[:3]), "glossary": terms, "beam": 1}).status_code == 200


def test_a_requests_sentences_and_terms_are_charged_together():
    from mt.glossary import Glossary
    from mt.serving.budget import Budget
    from mt.serving.requests import Limits, Refused

    glossary = Glossary.of([("chat", "dog"), ("chien", "cat")])
    budget = Budget(Limits(max_sentences=4, max_terms=3, max_sentence_terms=2))
    budget.charge(["le chat et le chien", "le chat"], glossary)  # three terms: at the limit
    with pytest.raises(Refused, match="--max-terms"):
        budget.charge(["le chien"], glossary)
    with pytest.raises(Refused, match="--max-sentences"):
        budget.charge(["a", "b", "c"])
    with pytest.raises(Refused, match="--max-sentence-terms"):
        Budget(Limits(max_sentence_terms=2)).charge(["chat chien chat"], glossary)


class FakeClock:
    """A clock that moves only when told: deadlines then never hinge on how fast this machine is."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _pages_service(timeout_s: float, clock=None):
    """A service over a stub pair whose batcher takes 40 s of `clock` a call (none of the real
    clock): pages in turn add up; the calls' sentence counts are recorded."""
    import asyncio

    from mt.serving.requests import Limits

    service = stub_service(Limits(timeout_s=timeout_s))
    service.clock = clock or FakeClock()
    pair = service.pairs[("fr", "en")]
    pair.translator.cfg.data.tgt_lang = "en"
    calls = []

    async def slow(sentences, options, budget=None):
        if budget is not None and budget.stopped():  # as the batcher leaves out a request given up on
            raise asyncio.CancelledError
        calls.append(len(sentences))
        service.clock.now += 40
        return [[type("H", (), {"text": s.upper(), "ids": [], "tokens": []})()] for s in sentences]

    pair.batcher.translate = slow
    return service, pair, calls


def test_a_request_of_several_pages_has_one_deadline_not_one_a_page():
    """Three pages of 40 s each (on a clock that moves only as they decode) under a 60 s --timeout:
    each page is within a minute of its own start, but the request is past its one deadline (504)."""
    import asyncio

    pytest.importorskip("markdown_it", reason="the formats extra is not installed (pip install 'mt[formats]')")
    from mt.serving.requests import Refused

    service, pair, calls = _pages_service(60)

    async def scenario(budget):
        return await service.translate_pages(pair, ["le chat", "le chien", "la femme"], "markdown", None, budget)

    budget = service.budget()
    with pytest.raises(Refused) as refused:
        asyncio.run(scenario(budget))
    assert refused.value.status == 504 and budget.stopped()  # each page stops at its next check
    assert calls == [1, 1]  # the third page's turn came past the deadline: it was never decoded


def test_pages_are_parsed_once_counted_together_and_decoded_together(monkeypatch):
    """Each page of a request is parsed, segmented and tokenized once: its work waits, counted, until
    every page is, then all decode; a page past a limit is refused before any decodes."""
    import asyncio

    pytest.importorskip("markdown_it", reason="the formats extra is not installed (pip install 'mt[formats]')")
    from mt.serving import service as service_module
    from mt.serving.requests import Limits, Refused

    parsed = []

    def counting(translator, data, *args, **kwargs):
        parsed.append(data)
        return translate_formatted(translator, data, *args, **kwargs)

    translate_formatted = service_module.translate_formatted
    monkeypatch.setattr(service_module, "translate_formatted", counting)
    service, pair, calls = _pages_service(600)
    pages = ["le chat", "Le chien dort. La femme lit.", "", "la maison"]
    answer = asyncio.run(service.translate_pages(pair, pages, "markdown", None, service.budget()))
    assert answer == ["LE CHAT", "LE CHIEN DORT. LA FEMME LIT.", "", "LA MAISON"] and sorted(parsed) == sorted(pages)
    assert sorted(calls) == [1, 1, 2]
    service.limits = Limits(max_sentences=3, timeout_s=600)
    parsed.clear(), calls.clear()
    with pytest.raises(Refused, match="--max-sentences"):
        asyncio.run(service.translate_pages(pair, pages, "markdown", None, service.budget()))
    assert calls == [] and len(parsed) <= len(pages)


def test_a_files_glossary_terms_are_held_a_sentence_at_a_time_not_to_the_requests_limit():
    """A file's sentences are bounded by its characters, not counted: with the operator's glossary a
    long document must not meet --max-terms, while --max-sentence-terms still holds for each."""
    from mt.glossary import Glossary
    from mt.serving.budget import Budget
    from mt.serving.requests import Limits, Refused

    glossary = Glossary.of([("chat", "dog"), ("chien", "cat")])
    budget = Budget(Limits(max_sentences=4, max_terms=3, max_sentence_terms=2))
    budget.charge(["le chat et le chien"] * 100, glossary, counted=False, sized=False)
    with pytest.raises(Refused, match="--max-sentence-terms"):
        budget.charge(["chat chien chat"], glossary, counted=False, sized=False)


def test_a_libretranslate_request_is_charged_in_full_before_any_of_it_decodes():
    """Alternatives split a request: texts of several lines are translated whole, the others as
    n-best lists. Five sentences under --max-sentences 4 are refused before either part decodes."""
    import asyncio

    from starlette.requests import Request

    from mt.serving import libretranslate
    from mt.serving.requests import Limits, Refused

    limits = Limits(max_sentences=4)
    service = stub_service(limits)
    calls = []

    async def translate(sentences, options, budget=None):
        calls.append(list(sentences))
        raise AssertionError("decoded before the whole request was charged")

    service.pairs[("fr", "en")].batcher.translate = translate
    body = {"q": ["le chat\nnoir", "un", "deux", "trois"], "source": "fr", "target": "en", "alternatives": 1}
    scope = {"type": "http", "method": "POST", "path": "/translate", "query_string": b"", "client": ("10.0.0.1", 1),
             "headers": [(b"content-type", b"application/json")]}  # fmt: skip
    raw = json.dumps(body).encode()
    with pytest.raises(Refused, match="--max-sentences") as refused:
        asyncio.run(libretranslate.translate(service, Request(scope), raw, limits))
    assert refused.value.status == 413 and calls == []


def test_the_rate_is_charged_for_well_formed_requests_and_one_over_it_entirely_is_413():
    import asyncio

    from mt.serving import app
    from mt.serving.access import RateLimiter
    from mt.serving.requests import Limits, Refused

    service = stub_service(Limits())
    service.rate = RateLimiter(6)
    malformed = asyncio.run(app.answer(service, json.dumps({"text": [1, 2, 3, 4, 5]}).encode(), Limits(), "c"))
    assert malformed.status_code == 422  # and it cost nothing:
    five = asyncio.run(app.answer(service, json.dumps({"text": ["un"] * 5}).encode(), Limits(), "c"))
    assert five["translations"] == ["UN"] * 5
    with pytest.raises(Refused, match="--rate-limit") as over:
        asyncio.run(app.answer(service, json.dumps({"text": ["un"] * 7}).encode(), Limits(), "other"))
    with pytest.raises(Refused) as again:
        asyncio.run(app.answer(service, json.dumps({"text": ["un"] * 2}).encode(), Limits(), "c"))
    assert over.value.status == 413 and again.value.status == 429


def test_a_request_given_up_while_an_earlier_group_decodes_leaves_its_own_group():
    """Two requests gathered into one group: the one given up on before the group decodes is not
    decoded with it."""
    import asyncio
    import threading
    from types import SimpleNamespace

    from mt.decode_options import DecodeOptions
    from mt.inference.search import Hypothesis
    from mt.serving.request_batcher import Batcher, Job

    decoded, release = [], threading.Event()

    def translate(sentences, options, *, batch_size=64, hypotheses=True, stop=None):
        decoded.append(list(sentences))
        if options.beam == 2:
            release.wait(30)
        return [[Hypothesis(s.upper(), 0.0, [])] for s in sentences]

    translator = SimpleNamespace(translate=translate, tokenizer=SimpleNamespace(encode_batch=lambda t: [[1]] * len(t)))

    async def scenario():
        batcher, loop = Batcher(translator), asyncio.get_running_loop()
        jobs = [Job([text], DecodeOptions(beam=beam), 2, loop.create_future())
                for text, beam in (("first", 2), ("gone", 1), ("kept", 1))]  # fmt: skip
        await batcher.bulk._slots.acquire()
        work = loop.create_task(batcher.bulk._decode_jobs(jobs))
        while not decoded:  # the first group is decoding
            await asyncio.sleep(0.01)
        jobs[1].future.cancel()
        release.set()
        await work
        await batcher.stop()
        return jobs[2].future.result()

    assert asyncio.run(scenario())[0][0].text == "KEPT"
    assert decoded == [["first"], ["kept"]]


def test_a_decode_given_up_on_stops_between_steps_and_frees_its_pair():
    """A request past its deadline: its batch's decoding is told to stop (the translator's `stop`),
    and the next request is decoded."""
    import asyncio
    import time as clock
    from types import SimpleNamespace

    from mt.decode_options import DecodeOptions
    from mt.inference.search import Cancelled, Hypothesis
    from mt.serving.request_batcher import Batcher

    steps = {"run": 0, "stopped_at": None}

    def translate(sentences, options, *, batch_size=64, hypotheses=True, stop=None):
        for _ in range(300):  # 3 s of "steps" unless told to stop
            if stop is not None and stop():
                steps["stopped_at"] = steps["run"]
                raise Cancelled("stopped")
            steps["run"] += 1
            clock.sleep(0.01)
        return [[Hypothesis(s.upper(), 0.0, [])] for s in sentences]

    translator = SimpleNamespace(translate=translate, tokenizer=SimpleNamespace(encode_batch=lambda t: [[1]] * len(t)))

    async def scenario():
        batcher = Batcher(translator, max_wait_ms=1)
        batcher.start()
        with pytest.raises((asyncio.TimeoutError, TimeoutError)):
            await asyncio.wait_for(batcher.translate(["given up"], DecodeOptions(beam=2)), 0.2)
        answer = await batcher.translate(["next"], DecodeOptions(beam=1))
        await batcher.stop()
        return answer

    assert asyncio.run(scenario())[0][0].text == "NEXT"
    assert steps["stopped_at"] is not None and steps["stopped_at"] < 300  # stopped partway


def test_an_archive_is_held_to_the_servers_own_bounds(server):
    """An upload's archive may unpack to 16 bytes for each byte --max-file-bytes allows (20,000
    here): an OpenDocument file of 400 kB of markup, 2 kB packed, is refused before it is parsed."""
    import io
    import zipfile

    from mt.formats.archives import Bounds, TooLarge, bounded, open_zip

    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        z.writestr("content.xml", "<office:document-content>" + " " * 400_000 + "</office:document-content>")
    data = packed.getvalue()
    assert len(data) < 20_000
    sent = httpx.post(f"{server}/translate_file", files={"file": ("big.odt", data)}, timeout=30)
    assert sent.status_code == 413 and "--max-file-bytes" in sent.json()["error"], sent.text
    with bounded(Bounds.following(file_bytes=10**6, document_chars=1000)), pytest.raises(TooLarge, match="markup"):
        open_zip(data, ".odt")  # 64 bytes of markup a character: 64,000
    assert open_zip(data, ".odt").namelist() == ["mimetype", "content.xml"]  # outside a server: the constants

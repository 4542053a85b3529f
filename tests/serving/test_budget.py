"""One deadline for every path of a request: the budget decides, the work checks it (mt.deadline),
the batcher's lanes keep a short request clear of documents, and a full server says 503 at once."""

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from mt import deadline
from mt.decode_options import DecodeOptions
from mt.inference.search import Cancelled, Hypothesis
from mt.serving.budget import Budget
from mt.serving.requests import Limits, Refused


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_checkpoint_raises_only_under_a_spent_budget():
    clock = FakeClock()
    budget = Budget(Limits(timeout_s=5), clock)
    deadline.checkpoint()  # no budget: nothing to answer to
    with budget.running():
        deadline.checkpoint()
        clock.now = 5
        with pytest.raises(Refused) as late:
            deadline.checkpoint()
    assert late.value.status == 504 and budget.stopped()
    deadline.checkpoint()  # outside again


def test_giving_up_stops_the_work_and_tells_whoever_waits():
    budget, told = Budget(Limits(timeout_s=600)), []
    budget.on_give_up(lambda: told.append("first"))
    assert not budget.stopped()
    budget.give_up()
    budget.on_give_up(lambda: told.append("late"))  # already given up: at once
    assert budget.stopped() and told == ["first", "late"]
    with pytest.raises(Refused, match="--timeout"):
        budget.check()


def test_within_answers_504_at_the_deadline_and_gives_the_request_up():
    async def scenario():
        budget = Budget(Limits(timeout_s=0.2))
        started = time.monotonic()
        with pytest.raises(Refused) as late:
            await budget.within(asyncio.sleep(30))
        return late.value.status, time.monotonic() - started, budget

    status, seconds, budget = asyncio.run(scenario())
    assert status == 504 and seconds < 5 and budget.stopped()


def test_within_lets_go_at_once_when_the_request_is_given_up_on():
    async def scenario():
        budget = Budget(Limits(timeout_s=600))
        asyncio.get_running_loop().call_later(0.1, budget.give_up)  # the client went away
        started = time.monotonic()
        with pytest.raises(Refused):
            await budget.within(asyncio.sleep(30))
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 5


def test_work_started_within_a_budget_runs_under_it_on_its_thread():
    seen = []

    async def scenario():
        budget = Budget(Limits(timeout_s=600))
        await budget.within(asyncio.to_thread(lambda: seen.append(deadline.current())))
        return budget

    assert seen == [asyncio.run(scenario())]


def test_a_client_that_goes_away_gives_its_request_up():
    from mt.serving.admission import _watch

    messages = [{"type": "http.request", "body": b"", "more_body": False}, {"type": "http.disconnect"}]

    async def receive():
        return messages.pop(0)

    budget = Budget(Limits(timeout_s=600))
    asyncio.run(_watch(SimpleNamespace(receive=receive), budget))
    assert budget.stopped()


def _hyps(sentences):
    return [[Hypothesis(s.upper(), 0.0, [])] for s in sentences]


def test_a_short_request_is_decoded_while_a_documents_batch_decodes():
    """The bulk lane holds a long batch that decodes until the short request's answer is in: with
    one lane for both, the short request would wait behind it and the bulk batch would never end."""
    from mt.serving.request_batcher import Batcher

    quick_done = threading.Event()

    def translate(sentences, options, *, batch_size=64, hypotheses=True, stop=None):
        if len(sentences) > 1:  # the document's
            assert quick_done.wait(20), "the short request waited behind the document"
        return _hyps(sentences)

    translator = SimpleNamespace(
        translate=translate, tokenizer=SimpleNamespace(encode_batch=lambda t: [[1] * 9] * len(t))
    )

    async def scenario():
        batcher = Batcher(translator, max_wait_ms=1, quick_tokens=16)
        batcher.start()
        try:
            document = asyncio.ensure_future(batcher.translate(["un"] * 20, DecodeOptions(beam=1)))
            await asyncio.sleep(0.1)
            short = await batcher.translate(["deux"], DecodeOptions(beam=1))
            quick_done.set()
            return short, await document
        finally:
            await batcher.stop()

    short, document = asyncio.run(scenario())
    assert short[0][0].text == "DEUX" and len(document) == 20


def test_a_batch_stops_once_every_budget_in_it_is_spent():
    from mt.serving.request_batcher import Batcher

    steps = []

    def translate(sentences, options, *, batch_size=64, hypotheses=True, stop=None):
        for _ in range(2000):
            if stop():
                raise Cancelled("stopped")
            steps.append(1)
            time.sleep(0.005)
        return _hyps(sentences)

    translator = SimpleNamespace(translate=translate, tokenizer=SimpleNamespace(encode_batch=lambda t: [[1]] * len(t)))

    async def scenario():
        batcher, budget = Batcher(translator, max_wait_ms=1), Budget(Limits(timeout_s=0.3))
        batcher.start()
        try:
            with pytest.raises(Refused):
                await budget.within(batcher.translate(["long"], DecodeOptions(beam=2), budget))
            await asyncio.sleep(0.5)
            return len(steps)
        finally:
            await batcher.stop()

    ran = asyncio.run(scenario())
    assert len(steps) == ran < 2000  # stopped partway (the stop would otherwise run all 2000), nothing after


def test_ctranslate2_is_asked_to_stop_between_its_batches():
    pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed (pip install 'mt[ctranslate2]')")
    from mt.inference.ctranslate2_engine import CTranslate2Translator

    calls = []
    engine = CTranslate2Translator.__new__(CTranslate2Translator)
    engine.options, engine.max_src_tokens, engine.said, engine.vmap = DecodeOptions(beam=1), 100, set(), False
    engine.workers = 1
    engine.cfg = SimpleNamespace(data=SimpleNamespace(max_len=64))
    engine.tokenizer = SimpleNamespace(split=lambda sentences: [s.split() for s in sentences])

    def translate_batch(pieces, o, batch_size, most):
        calls.append(len(pieces))
        return [SimpleNamespace(hypotheses=[], scores=[]) for _ in pieces]

    engine._translate_batch = translate_batch
    with pytest.raises(Cancelled):
        engine.translate([f"phrase {i}" for i in range(10)], batch_size=4, stop=lambda: len(calls) >= 2)
    assert calls == [4, 4]


def test_documents_take_their_own_threads_and_a_full_server_says_503():
    """Documents whose translations never come hold every document thread: a plain request is still
    answered at once, a further document is refused with 503 and Retry-After, and a request for
    more pages than the server has threads is 413."""
    from mt.serving.admission import Admission

    admission, release = Admission(max_requests=4, max_documents=2), threading.Event()

    async def scenario():
        budget = Budget(Limits(timeout_s=600))
        held = admission.documents(2)
        waiting = [held.run(budget, release.wait, 30) for _ in range(2)]
        plain = await asyncio.wait_for(asyncio.to_thread(lambda: "answered"), 5)
        with pytest.raises(Refused) as busy:
            admission.documents(1)
        with pytest.raises(Refused) as too_many:
            admission.documents(3)
        release.set()
        await asyncio.gather(*waiting)
        return plain, busy.value, too_many.value, admission.documents(2)

    plain, busy, too_many, again = asyncio.run(scenario())
    assert plain == "answered" and again.unused == 2  # the threads came back as their work ended
    assert busy.status == 503 and busy.headers["Retry-After"] and "--max-documents" in busy.message
    assert too_many.status == 413
    with admission.request(), admission.request(), admission.request(), admission.request():
        with pytest.raises(Refused, match="--max-requests") as full, admission.request():
            pass
    assert full.value.status == 503
    admission.close()


def test_a_document_past_its_deadline_is_neither_aligned_nor_written(monkeypatch):
    """The deadline passes while a page with inline tags decodes: the markup's alignment passes,
    which run on the document's own thread outside the batcher, never start, nor does writing."""
    pytest.importorskip("lxml", reason="the formats extra is not installed (pip install 'mt[formats]')")
    from mt.formats import html
    from mt.inference import markup
    from mt.inference.formatted import translate_formatted

    clock, aligned, written = FakeClock(), [], []
    budget = Budget(Limits(timeout_s=8), clock)

    def translate(sentences, options=None, *, hypotheses=False, **_):
        clock.now += 10  # decoding took past the deadline
        found = [[Hypothesis(s.upper(), 0.0, [5, 6], ["\u2581A", "\u2581B"])] for s in sentences]
        return found if hypotheses else [h[0].text for h in found]

    translator = SimpleNamespace(
        translate=translate,
        model=object(),  # an engine whose attention can be read: the alignment path
        cfg=SimpleNamespace(data=SimpleNamespace(src_lang="fr", tgt_lang="en")),
        max_src_tokens=100,
        tokenizer=SimpleNamespace(encode=str.split),
        encode=lambda sentences, warn_truncated=True: [[5] for _ in sentences],
        pieces=lambda ids: ["\u2581a" for _ in ids],
    )

    def attention(model, sources, targets):
        aligned.append(len(sources))
        return [torch.full((len(t) + 1, len(s) + 1), 0.5) for s, t in zip(sources, targets)]

    def write(*args):
        written.append(args)
        return writer(*args)

    writer = html._written
    monkeypatch.setattr(markup, "cross_attention_batch", attention)
    monkeypatch.setattr(html, "_written", write)
    page = "<p>Le <b>chat</b> noir dort.</p><p>Le <i>chien</i> blanc joue.</p>"
    with budget.running(), pytest.raises(Refused) as late:
        translate_formatted(translator, page, "html")
    assert late.value.status == 504 and aligned == [] and written == []
    clock.now = 0  # the same page within its deadline is aligned and written
    with Budget(Limits(timeout_s=60), clock).running():
        assert "<b>" in translate_formatted(translator, page, "html")
    assert aligned and written


def test_a_document_thread_comes_back_when_its_work_is_cancelled_before_it_began():
    """Work queued behind a busy thread and given up on before it starts never runs, and its
    reservation is given back all the same."""
    from mt.serving.admission import Admission

    admission, busy, ran = Admission(max_requests=4, max_documents=1), threading.Event(), []
    admission.threads.submit(busy.wait, 30)  # the one thread, taken by work of another kind

    async def scenario():
        queued = admission.documents(1).run(Budget(Limits(timeout_s=600)), ran.append, "ran")
        await asyncio.sleep(0.05)
        queued.cancel()
        await asyncio.sleep(0.05)

    asyncio.run(scenario())
    busy.set()
    admission.threads.shutdown(wait=True)
    assert ran == [] and admission.documents_held == 0

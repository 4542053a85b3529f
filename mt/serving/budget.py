"""One request's allowance, fixed when it arrives, and the one authority on whether its work may go
on: its deadline (--timeout, from arrival to answer), whether its answer has already gone (past
the deadline, a refusal of another part of it, a client that went away), and what its limits let
it spend (sentences, characters, glossary terms).

Every kind of work a request causes asks the budget and nothing else: the event loop awaits its
parts through `within`; worker threads run under it (mt/deadline.py carries it there) and call
`mt.deadline.checkpoint()` between pieces of work; the searches take `stopped` as their `stop`;
the batcher leaves out and stops the work of requests whose budgets are spent. Each front door
charges the work as it becomes known, before any of it is done, so a request past a limit is
refused (413) before it costs a decoding step, and one past its deadline stops (504) wherever
it is."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

from mt import deadline
from mt.serving.requests import Limits, Refused, check_sizes


class Budget:
    """A request's deadline, whether it has been given up on, and what it has been charged so far."""

    def __init__(self, limits: Limits, clock=time.monotonic):
        self.limits, self.clock = limits, clock
        self.deadline = clock() + limits.timeout_s
        self.sentences = self.terms = 0
        self._lock = threading.Lock()  # a request's pages charge it from threads of their own
        self._given_up = threading.Event()
        self._callbacks: list = []  # what to let go when the request is given up on

    def left(self) -> float:
        """Seconds until the deadline (0 past it)."""
        return max(0.0, self.deadline - self.clock())

    def expired(self) -> bool:
        return self.clock() >= self.deadline

    def stopped(self) -> bool:
        """Whether no one waits for this request's work any more: past its deadline, or given up on.
        The searches' `stop`, asked between decoding steps."""
        return self._given_up.is_set() or self.expired()

    def check(self) -> None:
        """Raise the request's 504 where its work may not go on (mt.deadline.checkpoint's call)."""
        if self.stopped():
            raise self.timed_out()

    def give_up(self) -> None:
        """The request's answer has gone (or will never be read): every part of its work stops at
        its next check, and whatever `within` awaits for it is let go at once."""
        with self._lock:
            self._given_up.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_give_up(self, callback) -> None:
        """`callback()` (from any thread) once the request is given up on; at once if it already is."""
        with self._lock:
            if not self._given_up.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def timed_out(self) -> Refused:
        return Refused(504, f"no answer within {self.limits.timeout_s:g} s (--timeout)")

    async def within(self, work):
        """`work` (an awaitable) awaited until the deadline, or until the request is given up on:
        then it is cancelled, the whole request given up on, and the answer is the 504. The work
        runs under this budget (mt.deadline), so threads it starts with asyncio.to_thread do too."""
        with deadline.bound(self):
            task = asyncio.ensure_future(work)
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self.on_give_up(lambda: _wake(loop, waiter))
        try:
            await asyncio.wait([task, waiter], timeout=self.left(), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # the request itself cancelled (the server stopping)
            task.cancel()
            self.give_up()
            raise
        if task.done():
            return task.result()
        task.cancel()
        task.add_done_callback(unheeded)
        self.give_up()
        raise self.timed_out()

    @contextlib.contextmanager
    def running(self):
        """Work on this thread answers to this budget (mt.deadline.checkpoint)."""
        with deadline.bound(self):
            yield self

    def charge(self, sentences: list[str], glossary=None, *, counted: bool = True, sized: bool = True) -> None:
        """`sentences` about to be translated, checked by `check_sizes` (`counted`: against
        --max-sentences with those charged before; a file's are bounded by its characters instead;
        `sized`: each against --max-chars), and the glossary terms they hold against the term
        limits: --max-sentence-terms each, and --max-terms in all where the sentences are counted
        (a file's many sentences would otherwise meet it with the operator's own glossary). Refused
        (413) past any, before the work starts; a 504 where the deadline has passed meanwhile."""
        self.check()
        with self._lock:
            if refused := check_sizes(sentences, self.limits, self.sentences, counted, sized):
                raise Refused(*refused)
            self.sentences += len(sentences) if counted else 0
        if glossary:
            self._charge_terms(sentences, glossary, counted)

    def _charge_terms(self, sentences: list[str], glossary, counted: bool) -> None:
        """The terms each sentence holds, found through the glossary's index (its matching is
        bounded by the sentence's words times the longest term's), checked against the limits."""
        limits = self.limits
        for s in sentences:
            self.check()
            found = len(glossary.find(s))
            if found > limits.max_sentence_terms:
                raise Refused(
                    413,
                    f"a sentence holds {found} glossary terms; the limit is {limits.max_sentence_terms} "
                    "(--max-sentence-terms): send fewer terms, or shorter sentences",
                )
            with self._lock:
                self.terms += found
                over = counted and self.terms > limits.max_terms
            if over:
                raise Refused(413, f"the request's sentences hold over {limits.max_terms} glossary terms (--max-terms)")


def settle(future: asyncio.Future) -> None:
    """Let whatever awaits `future` go on (on the loop's thread)."""
    if not future.done():
        future.set_result(None)


def _wake(loop: asyncio.AbstractEventLoop, future: asyncio.Future) -> None:
    """`settle` from any thread; nothing where the loop has already closed."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(settle, future)


def unheeded(task: asyncio.Future) -> None:
    """A part's failure once the request has already been answered is not worth a warning of its own."""
    if not task.cancelled():
        task.exception()

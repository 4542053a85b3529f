"""The deadline that the work in hand answers to, carried the way Python carries context: a server
sets its request's budget (mt/serving/budget.py) around the work that request causes (`bound`),
and the library's long loops (parsing, segmenting, matching glossary terms, aligning markup,
writing a document) call `checkpoint()` between their pieces. Past the deadline, or once the
request's answer has gone, the next checkpoint raises, so no work runs on for a request that no
one waits for. With no deadline set (the command line) a checkpoint does nothing.

The budget travels in a context variable, which `asyncio.to_thread` copies into its worker thread;
an executor of one's own sets it there (`bound`)."""

from __future__ import annotations

import contextlib
import contextvars

_current: contextvars.ContextVar = contextvars.ContextVar("mt_deadline", default=None)


def checkpoint() -> None:
    """Raise the deadline's own error where the work in hand has run out of time or been given up on."""
    budget = _current.get()
    if budget is not None:
        budget.check()


def current():
    """The budget the work in hand answers to, or None."""
    return _current.get()


@contextlib.contextmanager
def bound(budget):
    """Work inside answers to `budget` (anything with a `check()` that raises when time is up)."""
    token = _current.set(budget)
    try:
        yield budget
    finally:
        _current.reset(token)

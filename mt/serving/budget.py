"""One request's allowance, fixed when it arrives: its deadline (--timeout, from arrival to answer)
and what its limits let it spend (sentences, characters, glossary terms). Each front door charges
the work as it becomes known, before any of it is done, so a request past a limit is refused (413)
before it costs a decoding step, and one past its deadline stops (504) wherever it is."""

from __future__ import annotations

import threading
import time

from mt.serving.requests import Limits, Refused, check_sizes


class Budget:
    """A request's deadline and the sentences and glossary terms it has been charged so far."""

    def __init__(self, limits: Limits, clock=time.monotonic):
        self.limits, self.clock = limits, clock
        self.deadline = clock() + limits.timeout_s
        self.sentences = self.terms = 0
        self._lock = threading.Lock()  # a request's pages charge it from threads of their own

    def left(self) -> float:
        """Seconds until the deadline (0 past it)."""
        return max(0.0, self.deadline - self.clock())

    def expired(self) -> bool:
        return self.clock() >= self.deadline

    def timed_out(self) -> Refused:
        return Refused(504, f"no answer within {self.limits.timeout_s:g} s (--timeout)")

    def charge(self, sentences: list[str], glossary=None, *, counted: bool = True, sized: bool = True) -> None:
        """`sentences` about to be translated, checked by `check_sizes` (`counted`: against
        --max-sentences with those charged before; a file's are bounded by its characters instead;
        `sized`: each against --max-chars), and the glossary terms they hold against the term
        limits: --max-sentence-terms each, and --max-terms in all where the sentences are counted
        (a file's many sentences would otherwise meet it with the operator's own glossary). Refused
        (413) past any, before the work starts."""
        with self._lock:
            if refused := check_sizes(sentences, self.limits, self.sentences, counted, sized):
                raise Refused(*refused)
            self.sentences += len(sentences) if counted else 0
            if glossary:
                self._charge_terms(sentences, glossary, counted)

    def _charge_terms(self, sentences: list[str], glossary, counted: bool) -> None:
        limits = self.limits
        for s in sentences:
            found = len(glossary.find(s))
            if found > limits.max_sentence_terms:
                raise Refused(
                    413,
                    f"a sentence holds {found} glossary terms; the limit is {limits.max_sentence_terms} "
                    "(--max-sentence-terms): send fewer terms, or shorter sentences",
                )
            self.terms += found
            if counted and self.terms > limits.max_terms:
                raise Refused(413, f"the request's sentences hold over {limits.max_terms} glossary terms (--max-terms)")

"""What the server takes on at once, so that a full server says so at once (503 with Retry-After)
instead of queueing a request until its deadline answers 504: requests in flight (--max-requests)
and document threads (--max-documents).

Documents (files, and each page of a request in a format) are parsed, segmented, aligned and
written on threads of their own, never the event loop's default executor, which plain requests
and the batchers use: a document waiting for its translations holds one of these threads, and
only these. A request reserves every thread its pages need before any starts, so the pages of
one request, which wait for one another, always have their threads."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading

from mt.serving.budget import unheeded
from mt.serving.requests import Refused, read_capped

RETRY_AFTER_S = 2  # what a 503 suggests: a document's turn is seconds, not minutes


def full(what: str) -> Refused:
    return Refused(503, f"the server is busy ({what}); try again in a few seconds", {"Retry-After": str(RETRY_AFTER_S)})


class Admission:
    """The server's room: `request()` around each request's handling, `documents(n)` for its pages."""

    def __init__(self, max_requests: int, max_documents: int):
        self.max_requests, self.max_documents = max_requests, max_documents
        self.in_flight = self.documents_held = 0
        self.threads = concurrent.futures.ThreadPoolExecutor(max_documents, thread_name_prefix="document")
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def request(self):
        """One request in flight while inside; past --max-requests, 503 at once."""
        with self._lock:
            if self.in_flight >= self.max_requests:
                raise full(f"{self.max_requests} requests in flight; --max-requests")
            self.in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self.in_flight -= 1

    def documents(self, count: int) -> Documents:
        """`count` document threads, reserved together (413 for more than the server has, 503 where
        they are not free now); each is given back as its work ends."""
        if count > self.max_documents:
            raise Refused(
                413,
                f"{count} documents in one request; the server works on {self.max_documents} at once (--max-documents)",
            )
        with self._lock:
            if self.documents_held + count > self.max_documents:
                raise full(f"{self.documents_held} documents in work; --max-documents {self.max_documents}")
            self.documents_held += count
        return Documents(self, count)

    def _free(self, count: int) -> None:
        with self._lock:
            self.documents_held -= count

    def close(self) -> None:
        self.threads.shutdown(wait=False, cancel_futures=True)


class Documents:
    """Document threads reserved for one request: `run` starts work on one of them under `budget`;
    a thread not used is given back by `release`."""

    def __init__(self, admission: Admission, count: int):
        self.admission, self.unused = admission, count

    def run(self, budget, function, *args) -> asyncio.Future:
        """`function(*args)` on a reserved thread, answering to `budget` (mt.deadline). The thread
        is given back when the work ends, or when it is cancelled before it began."""
        self.unused -= 1

        def work():
            with budget.running():
                budget.check()  # given up on before its thread came: nothing to do
                return function(*args)

        try:
            started = self.admission.threads.submit(work)
        except BaseException:
            self.admission._free(1)
            raise
        started.add_done_callback(lambda _: self.admission._free(1))
        return asyncio.wrap_future(started)

    def release(self) -> None:
        """Give back the threads reserved and never started."""
        unused, self.unused = self.unused, 0
        if unused:
            self.admission._free(unused)


@contextlib.asynccontextmanager
async def received(service, request, cap: int, flag: str, slack: int = 65536, forms_are_libretranslate=False):
    """A request taken in (503 where the server already holds --max-requests): its budget, whose
    deadline runs from arrival, and its body (413 past `cap`). Its client going away before the
    answer gives the budget up, so that none of its work runs on. The body is read within the
    deadline, so that a client trickling it holds its place no longer than any other request.
    `forms_are_libretranslate`: a form on this route is LibreTranslate's, so is answered in its
    statuses from the start."""
    if forms_are_libretranslate and is_form(request):  # known by its headers: a full server is its 429
        request.scope["libretranslate"] = True
    with service.admission.request():
        budget = service.budget()
        raw = await budget.within(read_capped(request, cap, flag, slack))  # a trickling body: 504, not a hold
        watcher = asyncio.get_running_loop().create_task(_watch(request, budget))
        watcher.add_done_callback(unheeded)
        try:
            yield raw, budget
        finally:
            watcher.cancel()


def is_form(request) -> bool:
    """Whether a request comes as a form or with `q` in its query string (LibreTranslate's way)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return kind in ("application/x-www-form-urlencoded", "multipart/form-data") or "q" in request.query_params


async def _watch(request, budget) -> None:
    """Give `budget` up once the client disconnects (the body has been read: all that can come now)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    budget.give_up()

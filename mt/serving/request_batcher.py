"""Dynamic batching for the server: requests that arrive within a few milliseconds of each other are
decoded together, up to a token budget, on a worker thread; with decoding processes
(`--processes N`) up to N such batches decode side by side, each gathered while the others decode.

Two lanes, so that no client waits behind another's bulk: a request of a few sentences (at most
`quick_tokens` source tokens) goes to the quick lane, which decodes on a thread of its own beside
the bulk lane, where documents and long requests go. A one-sentence request beside any number of
documents then waits for no document's batch, only shares the cores with it.

Only requests with the same decoding options share a batch, and a sampling request never shares
one (its seed would otherwise depend on its neighbours), so no request's options reach another's.

A request given up on (its awaiting cancelled, or its budget spent: mt/serving/budget.py) is
skipped while it waits, and its sentences leave a batch that has not begun to decode; a batch
whose every request has been given up on stops between two decoding steps (with --processes,
only before its batches are sent to the processes; on CTranslate2, between its engine's batches):
its lane is free for the next at once. Tokenizing, which sizes a request for its lane, has a
thread of its own, so it never waits behind the requests' own work.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from collections import defaultdict
from dataclasses import dataclass, field

from mt.decode_options import DecodeOptions

QUICK_TOKENS = 256  # source tokens a request may hold and still go to the quick lane: a few sentences


@dataclass
class Job:
    sentences: list[str]
    options: DecodeOptions
    tokens: int  # source tokens, for the batch budget
    future: asyncio.Future = field(repr=False)
    budget: object = None  # the request's (mt/serving/budget.py), whose `stopped` says no one waits

    @property
    def group(self):
        return id(self) if self.options.sampling else self.options

    def gone(self) -> bool:
        return self.future.done() or (self.budget is not None and self.budget.stopped())


class Lane:
    """A queue of jobs, gathered into batches and decoded on this lane's own threads."""

    def __init__(self, name: str, translator, max_wait_s: float, max_tokens: int, batch_size: int, concurrency: int):
        self.translator, self.max_wait, self.max_tokens, self.batch_size = (
            translator,
            max_wait_s,
            max_tokens,
            batch_size,
        )
        self.queue: asyncio.Queue[Job] = asyncio.Queue()
        self.executor = concurrent.futures.ThreadPoolExecutor(concurrency, thread_name_prefix=f"decode-{name}")
        self.requests = self.batches = 0  # counts for /info: batches < requests when requests were merged
        self._worker: asyncio.Task | None = None
        self._slots = asyncio.Semaphore(concurrency)
        self._decoding: set[asyncio.Task] = set()
        self._stops = "stop" in inspect.signature(translator.translate).parameters  # an engine that can stop

    def start(self) -> None:
        self._worker = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._worker:
            self._worker.cancel()
        await asyncio.gather(*self._decoding, return_exceptions=True)
        self.executor.shutdown(wait=True)

    async def _gather(self) -> list[Job]:
        """The first waiting job, and whatever else arrives within max_wait, up to max_tokens.
        Jobs that queued while the previous batch decoded are taken at once."""
        jobs = [await self.queue.get()]
        loop = asyncio.get_running_loop()
        deadline, tokens = loop.time() + self.max_wait, jobs[0].tokens
        while tokens < self.max_tokens:
            try:
                job = self.queue.get_nowait()
            except asyncio.QueueEmpty:
                try:  # a get cut short by the timeout takes nothing off the queue
                    job = await asyncio.wait_for(self.queue.get(), max(0.0, deadline - loop.time()))
                except (asyncio.TimeoutError, TimeoutError):
                    break
            jobs.append(job)
            tokens += job.tokens
        return jobs

    async def _run(self) -> None:
        """Gather a batch once a slot is free (one slot: after the last batch has decoded, taking at
        once whatever queued meanwhile), and decode it in a task of its own."""
        while True:
            await self._slots.acquire()
            try:
                jobs = await self._gather()
            except BaseException:
                self._slots.release()
                raise
            task = asyncio.get_running_loop().create_task(self._decode_jobs(jobs))
            self._decoding.add(task)
            task.add_done_callback(self._decoding.discard)

    async def _decode_jobs(self, jobs: list[Job]) -> None:
        """Decode gathered jobs, those with equal options together, and answer each; then free the slot."""
        loop = asyncio.get_running_loop()
        try:
            groups: dict = defaultdict(list)
            for job in jobs:
                groups[job.group].append(job)
            for gathered in groups.values():
                group = [job for job in gathered if not job.gone()]  # given up on while others decoded: left out
                if not group:
                    continue
                sentences = [s for job in group for s in job.sentences]
                try:
                    stop = _all_given_up(group)
                    found = await loop.run_in_executor(self.executor, self._decode, sentences, group, stop)
                except Exception as e:  # noqa: BLE001 - handed to the requests that asked
                    for job in group:
                        if not job.future.done():
                            job.future.set_exception(e)
                    continue
                self.batches += 1
                self.requests += len(group)
                start = 0
                for job in group:
                    if not job.future.done():
                        job.future.set_result(found[start : start + len(job.sentences)])
                    start += len(job.sentences)
        finally:
            self._slots.release()

    def _decode(self, sentences: list[str], group: list[Job], stop):
        """The group's sentences decoded (on a worker thread), stopping once no one waits for them."""
        stops = {"stop": stop} if self._stops else {}
        return self.translator.translate(
            sentences, group[0].options, batch_size=self.batch_size, hypotheses=True, **stops
        )


class Batcher:
    """`await batcher.translate(sentences, options, budget)` -> list of n-best Hypothesis lists."""

    def __init__(
        self,
        translator,
        max_wait_ms: float = 5.0,
        max_tokens: int = 4096,
        batch_size: int = 64,
        quick_tokens: int = QUICK_TOKENS,
    ):
        self.translator, self.quick_tokens = translator, quick_tokens
        processes = getattr(translator, "processes", None)
        concurrency = len(processes.workers) if processes else 1  # batches decoding at once in each lane
        self.bulk = Lane("bulk", translator, max_wait_ms / 1000, max_tokens, batch_size, concurrency)
        self.quick = Lane("quick", translator, max_wait_ms / 1000, max(quick_tokens, 1), batch_size, concurrency)
        self.tokenizing = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tokenize")

    @property
    def requests(self) -> int:
        return self.bulk.requests + self.quick.requests

    @property
    def batches(self) -> int:
        return self.bulk.batches + self.quick.batches

    def start(self) -> None:
        self.bulk.start()
        self.quick.start()

    async def stop(self) -> None:
        await self.quick.stop()
        await self.bulk.stop()
        self.tokenizing.shutdown(wait=True)

    async def translate(self, sentences: list[str], options: DecodeOptions, budget=None):
        loop = asyncio.get_running_loop()
        encoded = await loop.run_in_executor(self.tokenizing, self.translator.tokenizer.encode_batch, sentences)
        tokens = sum(len(ids) + 1 for ids in encoded)
        job = Job(sentences, options, tokens, loop.create_future(), budget)
        lane = self.quick if tokens <= self.quick_tokens else self.bulk
        await lane.queue.put(job)
        return await job.future


def _all_given_up(group: list[Job]):
    """A `stop` for the decoding thread: true once every job of `group` is given up on. asyncio's
    futures belong to the event loop's thread, so their done-callbacks (which run on the loop) set
    an event that the decoding thread reads; a job's budget, which is thread-safe, is asked too."""
    event, waiting = threading.Event(), [len(group)]

    def one_done(future: asyncio.Future) -> None:
        waiting[0] -= 1
        if not waiting[0]:
            event.set()

    for job in group:
        job.future.add_done_callback(one_done)
    budgets = [job.budget for job in group]
    if any(b is None for b in budgets):
        return event.is_set
    return lambda: event.is_set() or all(b.stopped() for b in budgets)

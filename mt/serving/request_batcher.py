"""Dynamic batching for the server: requests that arrive within a few milliseconds of each other are
decoded together, up to a token budget, on one worker thread.

Only requests with the same decoding options share a batch, and a sampling request never shares
one (its seed would otherwise depend on its neighbours), so no request's options reach another's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import defaultdict
from dataclasses import dataclass, field

from mt.inference.decode_options import DecodeOptions


@dataclass
class Job:
    sentences: list[str]
    options: DecodeOptions
    tokens: int  # source tokens, for the batch budget
    future: asyncio.Future = field(repr=False)

    @property
    def group(self):
        return id(self) if self.options.sampling else self.options


class Batcher:
    """`await batcher.translate(sentences, options)` -> list of n-best Hypothesis lists."""

    def __init__(self, translator, max_wait_ms: float = 5.0, max_tokens: int = 4096, batch_size: int = 64):
        self.translator, self.max_wait, self.max_tokens, self.batch_size = (
            translator,
            max_wait_ms / 1000,
            max_tokens,
            batch_size,
        )
        self.queue: asyncio.Queue[Job] = asyncio.Queue()
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode")
        self.requests = self.batches = 0  # counts for /info: batches < requests when requests were merged
        self._worker: asyncio.Task | None = None

    def start(self) -> None:
        self._worker = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._worker:
            self._worker.cancel()
        self.executor.shutdown(wait=True)

    async def translate(self, sentences: list[str], options: DecodeOptions):
        tokens = sum(len(ids) + 1 for ids in self.translator.tokenizer.encode_batch(sentences))
        job = Job(sentences, options, tokens, asyncio.get_running_loop().create_future())
        await self.queue.put(job)
        return await job.future

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
        loop = asyncio.get_running_loop()
        while True:
            groups: dict = defaultdict(list)
            for job in await self._gather():
                if not job.future.done():  # a client that went away is simply skipped
                    groups[job.group].append(job)
            for jobs in groups.values():
                sentences = [s for job in jobs for s in job.sentences]
                try:
                    found = await loop.run_in_executor(self.executor, self._decode, sentences, jobs[0].options)
                except Exception as e:  # noqa: BLE001 - handed to the requests that asked
                    for job in jobs:
                        if not job.future.done():
                            job.future.set_exception(e)
                    continue
                self.batches += 1
                self.requests += len(jobs)
                start = 0
                for job in jobs:
                    if not job.future.done():
                        job.future.set_result(found[start : start + len(job.sentences)])
                    start += len(job.sentences)

    def _decode(self, sentences: list[str], options: DecodeOptions):
        return self.translator.translate(sentences, options, batch_size=self.batch_size, hypotheses=True)

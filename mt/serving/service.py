"""The translation service behind every front door (mt's own routes, LibreTranslate's, the page):
the models by language pair, each with its own batcher, and the checks and limits, which run before
any work. A front door parses its requests and shapes its answers; what it asks of the service
either comes back or is `Refused` with an HTTP status and a one-line reason."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from mt.errors import UserError
from mt.flags import glossary_of, open_translator
from mt.formats.archives import Bounds, TooLarge
from mt.inference.confidence import Trust
from mt.inference.documents import (
    cut_segmented,
    grouped,
    join_lines,
    lines_of,
    segment_lines,
    texts_of,
    token_counter,
)
from mt.inference.formatted import translate_formatted
from mt.serving.access import RateLimiter, read_keys
from mt.serving.admission import Admission, Documents
from mt.serving.budget import Budget, settle, unheeded
from mt.serving.request_batcher import Batcher
from mt.serving.requests import Limits, Refused, shown


@dataclass
class Pair:
    """One language direction: its model(s) and the batcher that gathers its requests."""

    source: str
    target: str
    models: list[str]
    translator: object
    batcher: Batcher | None = None

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"


@dataclass
class Counted:
    """Work charged to its request's budget, none of it decoded: `await counted.decode()` translates
    it; `counted.drop()` lets it go (a later part of the same request was refused), freeing what
    waits on it."""

    decode: Callable[[], Awaitable]
    drop: Callable[[], None] = lambda: None


class BatchedTranslator:
    """A pair's translator as a document's translation sees it (on a document thread): its
    sentences are charged to the request's budget before any is decoded, then go through the
    pair's batcher with everyone else's, a request's worth at a time, so that other requests decode
    between them; once the budget is spent, what waits in the batcher is let go and the thread
    stops. With a `gate` (a request of several pages) it says so once its sentences are charged
    (`counted`) and waits for the gate, which opens once every page of the request is charged: so
    every page is counted before any is decoded, and each is parsed and segmented once. All else
    is the translator's own (the markup's alignment passes check the budget between batches)."""

    def __init__(self, pair: Pair, loop, budget: Budget, kind: str, gate: threading.Event | None = None):
        self.pair, self.loop, self.budget, self.kind, self.gate = pair, loop, budget, kind, gate
        self.counted = loop.create_future() if gate is not None else None  # made on the loop's own thread

    def __getattr__(self, name):
        return getattr(self.pair.translator, name)

    def translate(self, sentences, options=None, *, hypotheses=False, progress=None, **_):
        glossary = (options or self.pair.translator.options).glossary
        self.budget.charge(sentences, glossary, counted=self.kind != "file", sized=False)
        if self.gate is not None and sentences:
            self.loop.call_soon_threadsafe(settle, self.counted)
            self.gate.wait(self.budget.left())  # the deadline bounds the wait, whatever the loop does
        found, chunk = [], self.budget.limits.max_sentences
        for start in range(0, len(sentences), chunk):
            self.budget.check()
            work = self.pair.batcher.translate(sentences[start : start + chunk], options, self.budget)
            pending = asyncio.run_coroutine_threadsafe(work, self.loop)
            self.budget.on_give_up(pending.cancel)
            try:
                found += pending.result(self.budget.left() + 1)  # given up on: cancelled before then
            except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError):
                raise self.budget.timed_out() from None
        self.budget.check()  # what comes back past the deadline is not an answer within it
        return found if hypotheses else [h[0].text for h in found]


class Service:
    """The pairs a server holds, loaded on a thread (so /health can say 'loading' meanwhile)."""

    def __init__(self, model_sets: list[list[str]], args, limits: Limits):
        self.model_sets, self.args, self.limits = model_sets, args, limits
        self.pairs: dict[tuple[str, str], Pair] = {}
        self.error: str | None = None
        self.ready = False
        self.long_sentences = 0  # sentences longer than the model takes, translated in pieces
        self.glossary = glossary_of(args)  # read before the models load: a bad file is one line at start
        keys = getattr(args, "api_keys", None)
        self.keys = read_keys(keys) if keys else None
        self.rate = RateLimiter(getattr(args, "rate_limit", 0) or 0)
        self._downloads: tempfile.TemporaryDirectory | None = None  # translated files, until fetched
        self.clock = time.monotonic  # what requests' deadlines are read on
        self.admission = Admission(limits.max_requests, limits.max_documents)
        # every plain text's sentences are judged (mt/inference/confidence.py); --min-confidence withholds
        self.trust = Trust(getattr(args, "min_confidence", None), getattr(args, "withheld", "source"))

    def load_in_background(self) -> None:
        threading.Thread(target=self._load, daemon=True).start()

    def _load(self) -> None:
        try:
            for models in self.model_sets:
                translator = open_translator(self.args, models)
                # the server's defaults, over the run's decode section
                translator.options = translator.options.replace(
                    scoring=getattr(self.args, "scoring", None),
                    glossary=self.glossary,
                    shortlist=False if getattr(self.args, "no_shortlist", False) else None,
                )
                if hasattr(translator, "max_constrained_beam"):  # a glossary never widens a search past --max-beam
                    translator.max_constrained_beam = self.limits.max_beam
                if self.glossary and getattr(self.args, "engine", "mt") != "mt":
                    raise UserError("--glossary needs constrained search, which only --engine mt has")
                key = (translator.cfg.data.src_lang, translator.cfg.data.tgt_lang)
                if key in self.pairs:
                    raise UserError(f"two models translate {key[0]}->{key[1]}: {self.pairs[key].models} and {models}")
                self.pairs[key] = Pair(*key, models, translator)
            self.ready = True
        except UserError as e:
            self.error = str(e)
            print(f"error: {e}", flush=True)

    def start(self) -> None:
        """Each pair's batcher, on the running event loop (once, when the first request needs it)."""
        a = self.args
        for pair in self.pairs.values():
            if pair.batcher is None:
                pair.batcher = Batcher(pair.translator, a.batch_wait_ms, a.max_batch_tokens, a.batch_size)
                pair.batcher.start()

    def admit(self, key: str | None, client: str, cost: int = 1, check_key: bool = True) -> None:
        """Refused where the server wants an API key and this is none of its keys (a missing one:
        400, a wrong one: 403, as LibreTranslate answers), or where the client is over its rate."""
        if key is not None and not isinstance(key, str):
            raise Refused(400, "Invalid request: api_key must be a string")
        if check_key and self.keys is not None:
            if not key:
                raise Refused(400, "Please contact the server operator to get an API key")
            if key not in self.keys:
                raise Refused(403, "Invalid API key")
        verified = self.keys is not None and key in self.keys  # an unchecked key is no way round the rate
        if self.rate.per_minute and cost > self.rate.per_minute:  # waiting would never let it through
            raise Refused(413, f"{cost} texts in one request; --rate-limit allows {self.rate.per_minute} a minute")
        if not self.rate.admit(key if verified else client, cost):
            raise Refused(429, f"Slowdown: {self.rate.per_minute} per 1 minute")

    def languages(self) -> list[str]:
        """Every language a pair reads or writes, in the order the pairs name them."""
        return list(dict.fromkeys(code for pair in self.pairs for code in pair))

    def downloads(self) -> Path:
        """The folder translated files wait in to be downloaded (removed when the server stops)."""
        if self._downloads is None:
            self._downloads = tempfile.TemporaryDirectory(prefix="mt-files-")
        return Path(self._downloads.name)

    async def stop(self) -> None:
        self.admission.close()
        if self._downloads is not None:
            self._downloads.cleanup()
        for pair in self.pairs.values():
            if pair.batcher:
                await pair.batcher.stop()
            if hasattr(pair.translator, "close"):  # worker processes, if --processes started any
                pair.translator.close()

    def available(self) -> None:
        """Refused unless the models have loaded."""
        if self.error:
            raise Refused(500, self.error)
        if not self.ready:
            raise Refused(503, "loading the model; try again when GET /health says ready")
        self.start()

    def pair(self, source: str | None = None, target: str | None = None) -> Pair:
        """The pair from `source` to `target` (either may be left out where one pair fits)."""
        self.available()
        fits = [p for (s, t), p in self.pairs.items() if source in (None, s) and target in (None, t)]
        if not fits:
            held = ", ".join(p.name for p in self.pairs.values())
            raise Refused(400, f"no model here translates {source or 'any'}->{target or 'any'}; this server has {held}")
        return fits[0]

    def sources(self) -> list[str]:
        return list(dict.fromkeys(s for s, _ in self.pairs))

    def budget(self) -> Budget:
        """A new request's budget: its deadline starts now."""
        return Budget(self.limits, self.clock)

    async def translate(self, pair: Pair, texts: list[str], options, split: bool = True, budget=None):
        """Texts translated (their line breaks kept, their paragraphs cut into sentences unless
        `split` is off): (one string per text; with n-best options each text's hypotheses, as one
        sentence; each text's sentences with their Confidence, as (source, Confidence)), charged to
        the request's `budget` before any work."""
        budget = budget or self.budget()
        return await (await self.count_texts(pair, texts, options, split, budget)).decode()

    async def count_texts(self, pair: Pair, texts: list[str], options, split: bool, budget: Budget) -> Counted:
        """`translate`'s first half: the texts cut into sentences and charged to the budget (on a
        worker thread, off the event loop), nothing decoded."""
        if options.n_best > 1:  # one sentence a text, as given
            await self._within_time(asyncio.to_thread(budget.charge, texts, options.glossary), budget)

            async def n_best():
                found = await self._decode(pair, texts, options, budget)
                given, judged = await self._judged(pair, texts, [h[0] for h in found], budget)
                return given, found, [[sentence] for sentence in zip(texts, judged)]

            return Counted(n_best)
        prepare = asyncio.to_thread(self._prepare, pair.translator, texts, split, options, budget)
        sentences, cuts, counts, long = await self._within_time(prepare, budget)

        async def joined():
            found = await self._decode(pair, sentences, options, budget)
            given, judged = await self._judged(pair, sentences, [h[0] for h in found], budget)
            self.long_sentences += long
            per_line = grouped(list(zip(sentences, judged)), [sum(cut.pieces) for cut in cuts])
            per_text = [sum(lines, []) for lines in grouped(per_line, counts)]
            return texts_of(join_lines(given, cuts, pair.target), counts), None, per_text

        return Counted(joined)

    async def _judged(self, pair: Pair, sources: list[str], best: list, budget: Budget):
        """Each translation judged, on a worker thread within the budget: (the texts to give, with
        any under --min-confidence withheld; their Confidence)."""
        return await self._within_time(asyncio.to_thread(self.trust.apply, pair.translator, sources, best), budget)

    def _prepare(self, translator, texts: list[str], split: bool, options, budget: Budget) -> tuple:
        """Texts made ready to translate: their lines cut into sentences, the sentences charged to
        the budget, then cut to the model. Runs on a worker thread, off the event loop, under the
        budget (`within` carries it here), whose checkpoints the segmenting passes."""
        lines, counts = lines_of(texts)
        segmented = segment_lines(lines, translator.cfg.data.src_lang, split)
        budget.charge([s for line in segmented for s in line.sentences], options.glossary)
        pieces, cuts, _ = cut_segmented(segmented, lines, translator.max_src_tokens, token_counter(translator))
        return pieces, cuts, counts, sum(sum(n > 1 for n in cut.pieces) for cut in cuts)

    async def _within_time(self, work, budget: Budget):
        """`work` awaited within the request's budget (504 past its deadline, and the whole
        request given up on); what it refuses as a user error is a 400 (413 for a file too large
        to unpack)."""
        try:
            return await budget.within(work)
        except TooLarge as e:
            raise Refused(413, str(e)) from None
        except UserError as e:  # an engine that cannot do what was asked (a glossary on CTranslate2)
            raise Refused(400, str(e)) from None

    async def _decode(self, pair: Pair, sentences: list[str], options, budget: Budget):
        return await self._within_time(pair.batcher.translate(sentences, options, budget), budget)

    async def translate_document(self, pair: Pair, data, fmt: str, options, name="the file", budget=None, kind="file"):
        """A document (a file's bytes, or a text in a format: `kind` "page") translated with its
        markup, on a document thread (503 where none is free), its sentences charged to the
        request's budget before any is decoded, then batched with other requests'; bounded by
        --max-document-chars, what an archive may unpack to and the request's deadline."""
        budget = budget or self.budget()
        threads = self.admission.documents(1)
        translator = BatchedTranslator(pair, asyncio.get_running_loop(), budget, kind)
        work = threads.run(budget, self._formatted, translator, data, fmt, options, name)
        return await self._within_time(work, budget)

    async def translate_pages(self, pair: Pair, texts: list[str], fmt: str, options, budget: Budget) -> list[str]:
        """A request's texts in a format (html, markdown, srt, vtt), all counted against its limits
        before any is decoded (`count_pages`), then translated together."""
        return await (await self.count_pages(pair, texts, fmt, options, budget)).decode()

    async def count_pages(
        self, pair: Pair, texts: list[str], fmt: str, options, budget: Budget, threads: Documents | None = None
    ) -> Counted:
        """Each text parsed, segmented and charged to the budget on a document thread of its own
        (all reserved at once, 503 where they are not free; or taken from `threads`, the request's
        reservation for pages of several pairs), one after another; each then waits there, its
        work kept, until `decode` opens the gate for all."""
        loop, gate = asyncio.get_running_loop(), threading.Event()
        readers = [BatchedTranslator(pair, loop, budget, "page", gate) for _ in texts]
        own = threads is None
        threads = self.admission.documents(len(texts)) if own else threads
        budget.on_give_up(gate.set)  # a page waiting at the gate goes, to stop at its next check
        pages = []
        try:
            for reader, text in zip(readers, texts):
                page = threads.run(budget, self._formatted, reader, text, fmt, options, "the text")
                page.add_done_callback(unheeded)
                pages.append(page)
                await self._within_time(_charged(page, reader.counted), budget)
        except BaseException:
            budget.give_up()
            raise
        finally:
            if own:
                threads.release()

        async def decode():
            gate.set()
            try:
                return await self._within_time(asyncio.gather(*pages), budget)
            except BaseException:
                budget.give_up()
                raise

        return Counted(decode, budget.give_up)

    def _formatted(self, translator: BatchedTranslator, data, fmt: str, options, name: str):
        """`data` translated by `translator` (on a worker thread), within the server's bounds."""
        bounds = Bounds.following(self.limits.max_file_bytes, self.limits.max_document_chars)
        return translate_formatted(
            translator, data, fmt, options,
            max_chars=self.limits.max_document_chars, name=name, archive_bounds=bounds,
        )  # fmt: skip

    def info(self) -> dict:
        """What /info shows of the pairs: each with its model, engine and size."""
        out = []
        for pair in self.pairs.values():
            models = getattr(pair.translator, "models", [])
            out.append(
                {
                    "source_language": pair.source,
                    "target_language": pair.target,
                    "model": pair.models,
                    "parameters": sum(p.numel() for m in models for p in m.parameters()) or None,
                    "decoding_defaults": shown(pair.translator.options),
                    "requests_served": pair.batcher.requests if pair.batcher else 0,
                    "batches_decoded": pair.batcher.batches if pair.batcher else 0,
                }
            )
        return {"pairs": out, "long_sentences_cut": self.long_sentences, "limits": dataclasses.asdict(self.limits)}


async def _charged(page: asyncio.Future, counted: asyncio.Future) -> None:
    """Once a page's sentences are charged, or it is done without any (its refusal raised)."""
    await asyncio.wait([page, counted], return_when=asyncio.FIRST_COMPLETED)
    if page.done():
        page.result()

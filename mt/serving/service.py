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
from dataclasses import dataclass
from pathlib import Path

from mt.errors import UserError
from mt.flags import glossary_of, open_translator
from mt.formats.archives import Bounds, TooLarge
from mt.inference.documents import cut_segmented, join_lines, lines_of, segment_lines, texts_of, token_counter
from mt.inference.formatted import translate_formatted
from mt.serving.access import RateLimiter, read_keys
from mt.serving.budget import Budget
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


class _Counted(Exception):
    """A dry run's sentences are counted: the translation it would start is not wanted."""


class BatchedTranslator:
    """A pair's translator as a document's translation sees it (on a worker thread): its sentences
    are charged to the request's budget before any is decoded, then go through the pair's batcher
    with everyone else's, a request's worth at a time, so that other requests decode between them;
    a document given up on (past --timeout) stops, the part in the batcher included. `counting`:
    charge the sentences and stop there (`_Counted`), to count a request's documents before any is
    translated. All else is the translator's own."""

    def __init__(self, pair: Pair, loop, budget: Budget, kind: str, counting: bool = False):
        self.pair, self.loop, self.budget, self.kind, self.counting = pair, loop, budget, kind, counting
        self.given_up = threading.Event()
        self._lock, self._pending = threading.Lock(), None

    def __getattr__(self, name):
        return getattr(self.pair.translator, name)

    def give_up(self) -> None:
        """Past the deadline: nothing more is sent, and the part in the batcher is dropped."""
        with self._lock:
            self.given_up.set()
            if self._pending is not None:
                self._pending.cancel()

    def translate(self, sentences, options=None, *, hypotheses=False, progress=None, **_):
        glossary = (options or self.pair.translator.options).glossary
        self.budget.charge(sentences, glossary, counted=self.kind != "file", sized=False)
        if self.counting:
            raise _Counted
        found, chunk = [], self.budget.limits.max_sentences
        for start in range(0, len(sentences), chunk):
            with self._lock:
                if self.given_up.is_set() or self.budget.expired():
                    raise self.budget.timed_out()
                work = self.pair.batcher.translate(sentences[start : start + chunk], options)
                self._pending = asyncio.run_coroutine_threadsafe(work, self.loop)
            try:
                found += self._pending.result()
            except concurrent.futures.CancelledError:
                raise self.budget.timed_out() from None
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

    def load_in_background(self) -> None:
        threading.Thread(target=self._load, daemon=True).start()

    def _load(self) -> None:
        try:
            for models in self.model_sets:
                translator = open_translator(self.args, models)
                # the server's defaults, over the run's decode section
                translator.options = translator.options.replace(
                    scoring=getattr(self.args, "scoring", None), glossary=self.glossary
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
        return Budget(self.limits)

    async def translate(self, pair: Pair, texts: list[str], options, split: bool = True, budget=None):
        """Texts translated (their line breaks kept, their paragraphs cut into sentences unless
        `split` is off): (one string per text, or with n-best options each text's hypotheses
        as one sentence), charged to the request's `budget` before any work."""
        budget = budget or self.budget()
        if options.n_best > 1:  # one sentence a text, as given
            budget.charge(texts, options.glossary)
            found = await self._decode(pair, texts, options, budget)
            return [h[0].text for h in found], found
        prepared = await self._within_time(
            asyncio.to_thread(self._prepare, pair.translator, texts, split, options, budget), budget
        )
        sentences, cuts, counts, long = prepared
        found = await self._decode(pair, sentences, options, budget)
        self.long_sentences += long
        joined = join_lines([h[0].text for h in found], cuts, pair.target)
        return texts_of(joined, counts), None

    def _prepare(self, translator, texts: list[str], split: bool, options, budget: Budget) -> tuple:
        """Texts made ready to translate: their lines cut into sentences, the sentences charged to
        the budget, then cut to the model. Runs on a worker thread, off the event loop."""
        lines, counts = lines_of(texts)
        segmented = segment_lines(lines, translator.cfg.data.src_lang, split)
        budget.charge([s for line in segmented for s in line.sentences], options.glossary)
        pieces, cuts, _ = cut_segmented(segmented, lines, translator.max_src_tokens, token_counter(translator))
        return pieces, cuts, counts, sum(sum(n > 1 for n in cut.pieces) for cut in cuts)

    async def _within_time(self, work, budget: Budget, on_timeout=None):
        """`work` awaited until the request's deadline (504 past it); what it refuses as a user
        error is a 400 (413 for a file too large to unpack)."""
        try:
            return await asyncio.wait_for(work, budget.left())
        except (asyncio.TimeoutError, TimeoutError):
            if on_timeout:
                on_timeout()
            raise budget.timed_out() from None
        except TooLarge as e:
            raise Refused(413, str(e)) from None
        except UserError as e:  # an engine that cannot do what was asked (a glossary on CTranslate2)
            raise Refused(400, str(e)) from None

    async def _decode(self, pair: Pair, sentences: list[str], options, budget: Budget):
        return await self._within_time(pair.batcher.translate(sentences, options), budget)

    async def translate_document(self, pair: Pair, data, fmt: str, options, name="the file", budget=None, kind="file"):
        """A document (a file's bytes, or a text in a format: `kind` "page") translated with its
        markup, its sentences charged to the request's budget before any is decoded, then batched
        with other requests'; bounded by --max-document-chars, what an archive may unpack to and
        the request's deadline."""
        budget = budget or self.budget()
        translator = BatchedTranslator(pair, asyncio.get_running_loop(), budget, kind)
        return await self._within_time(
            self._formatted(translator, data, fmt, options, name), budget, translator.give_up
        )

    async def translate_pages(self, pair: Pair, texts: list[str], fmt: str, options, budget: Budget) -> list[str]:
        """A request's texts in a format (html, markdown, srt, vtt): all of them counted against its
        limits first (each parsed and segmented, nothing decoded), then translated in turn."""
        if len(texts) > 1:
            counting = Budget(self.limits)
            counting.deadline = budget.deadline
            for text in texts:
                counter = BatchedTranslator(pair, None, counting, "page", counting=True)
                try:
                    await self._within_time(self._formatted(counter, text, fmt, options, "the text"), budget)
                except _Counted:
                    pass
        return [await self.translate_document(pair, text, fmt, options, "the text", budget, "page") for text in texts]

    def _formatted(self, translator: BatchedTranslator, data, fmt: str, options, name: str):
        bounds = Bounds.following(self.limits.max_file_bytes, self.limits.max_document_chars)
        return asyncio.to_thread(
            translate_formatted, translator, data, fmt, options,
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

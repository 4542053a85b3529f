"""The translation service behind every front door (mt's own routes, LibreTranslate's, the page):
the models by language pair, each with its own batcher, and the checks and limits, which run before
any work. A front door parses its requests and shapes its answers; what it asks of the service
either comes back or is `Refused` with an HTTP status and a one-line reason."""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from mt.errors import UserError
from mt.flags import glossary_of, open_translator
from mt.inference.documents import cut_segmented, join_lines, lines_of, segment_lines, texts_of, token_counter
from mt.inference.formatted import translate_formatted
from mt.serving.access import RateLimiter, read_keys
from mt.serving.request_batcher import Batcher
from mt.serving.requests import Limits, Refused, check_sizes, shown


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


class BatchedTranslator:
    """A pair's translator as a document's translation sees it (on a worker thread): its sentences
    go through the pair's batcher with everyone else's, a request's worth at a time, so that other
    requests decode between them and a document given up on (past --timeout) stops; all else is
    the translator's own."""

    def __init__(self, pair: Pair, loop: asyncio.AbstractEventLoop, chunk: int):
        self.pair, self.loop, self.chunk = pair, loop, chunk
        self.given_up = threading.Event()

    def __getattr__(self, name):
        return getattr(self.pair.translator, name)

    def translate(self, sentences, options=None, *, hypotheses=False, progress=None, **_):
        found = []
        for start in range(0, len(sentences), self.chunk):
            if self.given_up.is_set():
                raise Refused(504, "given up: past --timeout")
            part = sentences[start : start + self.chunk]
            found += asyncio.run_coroutine_threadsafe(self.pair.batcher.translate(part, options), self.loop).result()
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

    async def translate(self, pair: Pair, texts: list[str], options, split: bool = True) -> tuple[list, list | None]:
        """Texts translated (their line breaks kept, their paragraphs cut into sentences unless
        `split` is off): (one string per text, or with n-best options each text's hypotheses
        as one sentence), checked against the limits before any work."""
        if options.n_best > 1:  # one sentence a text, as given
            if refused := check_sizes(texts, self.limits):
                raise Refused(*refused)
            found = await self._decode(pair, texts, options)
            return [h[0].text for h in found], found
        prepared = await asyncio.to_thread(self._prepare, pair.translator, texts, split)
        sentences, cuts, counts, long = prepared
        found = await self._decode(pair, sentences, options)
        self.long_sentences += long
        joined = join_lines([h[0].text for h in found], cuts, pair.target)
        return texts_of(joined, counts), None

    def _prepare(self, translator, texts: list[str], split: bool) -> tuple:
        """Texts made ready to translate: their lines cut into sentences, the sentences checked
        against the limits, then cut to the model. Runs on a worker thread, off the event loop."""
        lines, counts = lines_of(texts)
        segmented = segment_lines(lines, translator.cfg.data.src_lang, split)
        if refused := check_sizes([s for line in segmented for s in line.sentences], self.limits):
            raise Refused(*refused)
        pieces, cuts, _ = cut_segmented(segmented, lines, translator.max_src_tokens, token_counter(translator))
        return pieces, cuts, counts, sum(sum(n > 1 for n in cut.pieces) for cut in cuts)

    async def _within_time(self, work, on_timeout=None):
        """`work` awaited within --timeout (504 past it); what it refuses as a user error is a 400."""
        try:
            return await asyncio.wait_for(work, self.limits.timeout_s)
        except (asyncio.TimeoutError, TimeoutError):
            if on_timeout:
                on_timeout()
            raise Refused(504, f"no answer within {self.limits.timeout_s:g} s (--timeout)") from None
        except UserError as e:  # an engine that cannot do what was asked (a glossary on CTranslate2)
            raise Refused(400, str(e)) from None

    async def _decode(self, pair: Pair, sentences: list[str], options):
        return await self._within_time(pair.batcher.translate(sentences, options))

    async def translate_document(self, pair: Pair, data: bytes | str, fmt: str, options, name: str = "the file"):
        """A document (a file's bytes, or a text in a format) translated with its markup, its
        sentences batched with other requests'; bounded by --max-document-chars and --timeout."""
        translator = BatchedTranslator(pair, asyncio.get_running_loop(), self.limits.max_sentences)
        job = asyncio.to_thread(
            translate_formatted, translator, data, fmt, options, max_chars=self.limits.max_document_chars, name=name
        )
        return await self._within_time(job, translator.given_up.set)

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

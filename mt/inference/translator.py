"""The translation API: `Translator.load(run_dir).translate(sentences, options)`.

Loads a self-contained run directory (or one checkpoint file in it, or several runs as an
ensemble), encodes each source once, decodes in length-sorted batches with the KV cache, and
returns one string per input, in order, or the n best hypotheses with their scores.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from mt.data.vocab import END
from mt.decode_options import DecodeOptions
from mt.errors import UserError
from mt.inference.confidence import Calibrator, Confidence, assess, calibrator_for
from mt.inference.constraints import Constraints, DynamicBeamAllocation, build_constraints, word_continuations
from mt.inference.loading import DEFAULT_MODEL, load_models
from mt.inference.processes import DecodingProcesses, ProcessDied
from mt.inference.search import (
    Cancelled,
    Hypothesis,
    beam_search,
    greedy_or_sample,
    target_logprobs,
    target_token_logprobs,
)
from mt.inference.shortlist import Shortlist, run_shortlist
from mt.runtime import Runtime

# Source tokens a decoding batch holds at most, padding included: a batch's caches grow with its
# sentences times their length, so long sentences (news, not captions) come in fewer at a time.
BATCH_TOKENS = 2048


def token_bounded(items: list, lengths: list[int], batch_size: int, max_tokens: int) -> Iterator[list]:
    """`items`, in order (shortest first), cut into runs of at most `batch_size` whose count times
    the longest length stays within `max_tokens` (a single item always makes a batch)."""
    batch: list = []
    for item, length in zip(items, lengths):
        if batch and (len(batch) == batch_size or (len(batch) + 1) * length > max_tokens):
            yield batch
            batch = []
        batch.append(item)
    if batch:
        yield batch


class Translator:
    """Trained translation model(s), the tokenizer and the recipe's decoding defaults."""

    def __init__(self, cfg, tokenizer, models, runtime: Runtime):
        self.cfg, self.tokenizer, self.runtime, self.device = cfg, tokenizer, runtime, runtime.device
        self.models = models if isinstance(models, list) else [models]
        self.model = self.models[0]
        self.max_src_tokens = min(m.max_len for m in self.models) - 1  # room for the source's <END>
        self.vocab = self.model.embed.tokens.num_embeddings
        self.options = cfg.decode  # the recipe's decode section: the defaults
        self.source: tuple | None = None  # (run dirs, quantize) as loaded: what worker processes load
        self.processes: DecodingProcesses | None = None
        self.said: set[str] = set()  # the warnings given, each once
        self.continuations: torch.Tensor | None = None  # which tokens go on a word (a glossary's first use)
        self.max_constrained_beam = MAX_CONSTRAINED_BEAM  # a server lowers it to its --max-beam
        self.shortlist: Shortlist | None = None  # the run's (an ensemble's: the union), used on a CPU
        self._calibrator: Calibrator | None = None  # read on the first call of `calibrator`

    @classmethod
    def load(
        cls,
        run_dir=DEFAULT_MODEL,
        device: str | torch.device = "cpu",
        quantize: str | None = None,
        precision: str = "auto",
    ) -> Translator:
        """Load a run directory (several: an ensemble averaging their probabilities at each step);
        quantize="int8" quantizes the Linear layers for CPU inference; `precision` as Runtime.for_inference."""
        device = Runtime.inference_device(device)
        cfg, tokenizer, models = load_models(run_dir, device, quantize)
        translator = cls(cfg, tokenizer, models, Runtime.for_inference(device, precision, cfg.train.precision))
        translator.source = (run_dir, quantize)
        run_dirs = [run_dir] if isinstance(run_dir, (str, Path)) else run_dir
        translator.shortlist = run_shortlist(run_dirs, tokenizer.fingerprint(), translator.vocab)
        return translator

    def start_processes(self, count: int | None = None) -> None:
        """Decode from now on in `count` worker processes (default: one per intra-op thread), each
        with its own copy of the model on one thread, instead of in threads of this process: no
        turns at Python's lock, for a second or two of start and a model's memory per process
        (mt/inference/processes.py). CPU only; `close` stops them."""
        if self.device.type != "cpu":
            raise UserError(f"decoding processes are for a CPU, not {self.device}")
        if self.source is None:
            raise UserError("decoding processes load the model themselves: use a Translator made by Translator.load")
        self.close()
        run_dirs, quantize = self.source
        load = functools.partial(Translator.load, run_dirs, "cpu", quantize, self.runtime.eval_precision)
        self.processes = DecodingProcesses(load, count or torch.get_num_threads())

    def close(self) -> None:
        """Stop the decoding processes, if any; decoding goes on in this process."""
        if self.processes is not None:
            self.processes.close()
            self.processes = None

    def encode(self, sentences: list[str], warn_truncated: bool = True) -> list[list[int]]:
        """Subword ids of each sentence, cut to what the model can read (with a warning)."""
        encoded = self.tokenizer.encode_batch(sentences)
        for i, ids in enumerate(encoded):
            if len(ids) > self.max_src_tokens and warn_truncated:
                print(
                    f"warning: line {i + 1} has {len(ids)} tokens; translating its first {self.max_src_tokens}",
                    file=sys.stderr,
                )
            encoded[i] = ids[: self.max_src_tokens]
        return encoded

    def batches(
        self, encoded: list[list[int]], batch_size: int, skip_empty: bool = True
    ) -> Iterator[tuple[list[int], torch.Tensor]]:
        """Length-sorted batches of the (non-empty) inputs: (their indices, (B, S) padded ids with <END>),
        each of at most `batch_size` sentences and BATCH_TOKENS padded source tokens."""
        todo = sorted((i for i, ids in enumerate(encoded) if ids or not skip_empty), key=lambda i: len(encoded[i]))
        for rows in token_bounded(todo, [len(encoded[i]) + 1 for i in todo], batch_size, BATCH_TOKENS):
            src = torch.zeros(len(rows), len(encoded[rows[-1]]) + 1, dtype=torch.long)
            for j, i in enumerate(rows):
                src[j, : len(encoded[i]) + 1] = torch.tensor(encoded[i] + [END])
            yield rows, src.to(self.device)

    def translate(
        self,
        sentences: list[str],
        options: DecodeOptions | None = None,
        *,
        batch_size: int = 64,
        use_cache: bool = True,
        warn_truncated: bool = True,
        hypotheses: bool = False,
        workers: int | None = None,
        progress: Callable[[int], None] | None = None,
        stop: Callable[[], bool] | None = None,
        **changes,
    ) -> list[str] | list[list[Hypothesis]]:
        """Translate `sentences` with `options` (default: the recipe's decode section), changed by
        any keyword named like an option (beam=1, temperature=0.8, ...). Returns one string per
        sentence, or with hypotheses=True each sentence's n_best Hypothesis objects, best first.
        Batches are decoded `workers` at a time (default on a CPU: one per intra-op thread; sampling
        decodes one batch at a time, so that a seed gives the same samples: mt/cpu/workers.py),
        or after `start_processes` in those processes. `progress` is told how many sentences each
        batch held as it is done (a progress bar's update). `stop`, asked between decoding steps,
        ends the work with `Cancelled` when true (a server's request given up on)."""
        o = (options or self.options).replace(**changes)
        if batch_size <= 0:
            raise UserError(f"batch size must be positive, got {batch_size}")
        generator = torch.Generator(device=self.device).manual_seed(o.seed)
        found = [[Hypothesis("", 0.0, [])] for _ in sentences]  # empty in, empty out
        jobs = list(self.batches(self.encode(sentences, warn_truncated), batch_size))
        terms = self._constraints(sentences, o) if o.glossary else None
        sources = [src for _, src in jobs]
        if terms is not None:
            constrained = [[terms[i] for i in rows] for rows, _ in jobs]
            decoded = self._decode_constrained(sources, constrained, o, use_cache, workers, progress, stop)
        else:
            decoded = self._decode(sources, o, use_cache, generator, workers, progress, stop)
        for (rows, _), (ids, scores, logprobs) in zip(jobs, decoded):
            for i, outs, row_scores, row_logprobs in zip(rows, ids, scores, logprobs):
                found[i] = [
                    Hypothesis(self.tokenizer.decode(x), s, x, self.pieces(x), lp)
                    for x, s, lp in zip(outs, row_scores, row_logprobs)
                ]
        return found if hypotheses else [h[0].text for h in found]

    def _decode(self, batches: list[torch.Tensor], o: DecodeOptions, use_cache, generator, workers, progress, stop):
        """Each batch's (n-best ids, scores list, token log-probabilities): in the decoding
        processes where they run (not for sampling, whose batches draw from one generator in
        turn), else on `workers` threads.
        Even a single batch goes to a process: this one is left to the caller (a server's requests,
        its event loop), and a server's calls from several threads then decode side by side. A
        process is asked nothing between steps: `stop` is heard there only before the batches go."""
        if self.processes is not None and use_cache and not o.sampling:
            if stop is not None and stop():
                raise Cancelled("the search was stopped")
            try:
                done = self.processes.map(o, batches)
                if progress:
                    progress(sum(b.size(0) for b in batches))
                return done
            except ProcessDied:
                self.close()  # the rest of this translator's work decodes here, on threads
                raise
        if o.sampling:
            workers = 1
        elif workers is None:
            workers = self.runtime.decode_workers(len(batches))
        search = functools.partial(self.search_batch, o, use_cache=use_cache, generator=generator, stop=stop)
        if progress:
            search = _telling(search, progress)
        return [(ids, scores.tolist(), lps) for ids, scores, lps in self.runtime.map_batches(search, batches, workers)]

    def _constraints(self, sentences: list[str], o: DecodeOptions) -> list[Constraints] | None:
        """Each sentence's glossary terms as constraints on its output (None: no sentence has one)."""
        found = [o.glossary.find(s) for s in sentences]
        if not any(found):
            return None
        return build_constraints(self.tokenizer, found, self._warn_once)

    def _continuations(self) -> torch.Tensor:
        """(V,) which tokens go on the word before them (made once, on a glossary's first use)."""
        if self.continuations is None:
            pieces = self.pieces(list(range(min(self.tokenizer.vocab_size, self.vocab))))
            self.continuations = word_continuations(pieces + [""] * (self.vocab - len(pieces)))  # past it: none
        return self.continuations

    def _warn_once(self, message: str) -> None:
        if message not in self.said:
            self.said.add(message)
            print(f"warning: {message}", file=sys.stderr)

    def _decode_constrained(self, batches, constrained, o: DecodeOptions, use_cache: bool, workers, progress, stop):
        """`_decode` for batches whose sentences have constraints, on threads of this process (never
        in the decoding processes, whose workers take plain batches alone: said once): each batch's
        sentences with terms by constrained search, the others by the plain one."""
        if self.processes is not None:
            self._warn_once("sentences with glossary terms decode on this process's threads, not in --processes")
        search = functools.partial(self._search_constrained, o, use_cache=use_cache, stop=stop)
        if progress:
            search = _telling(search, progress, lambda job: job[0])
        workers = self.runtime.decode_workers(len(batches)) if workers is None else workers
        jobs = list(zip(batches, constrained))
        found = self.runtime.map_batches(search, jobs, workers, cost=lambda job: job[0].numel())
        return [(ids, scores.tolist(), lps) for ids, scores, lps in found]

    def _search_constrained(self, o: DecodeOptions, job: tuple, use_cache: bool = True, stop=None):
        """One batch, (B, S) sources and their constraints: rows with constraints by dynamic beam
        allocation, the rest by plain search. A beam narrower than a sentence's constraint tokens
        plus one (greedy decoding's, say) cannot give each bank a place: those sentences search with
        that many beams (at most `max_constrained_beam`), as is said once."""
        src, sets = job
        hard = [i for i, c in enumerate(sets) if c.need]
        easy = [i for i, c in enumerate(sets) if not c.need]
        ids: list = [None] * len(sets)
        logprobs: list = [None] * len(sets)
        scores = torch.full((len(sets), o.n_best), float("-inf"))
        if easy:
            found, got, lps = self.search_batch(o, src[easy], use_cache, stop=stop)
            for j, i in enumerate(easy):
                ids[i], scores[i, : got.size(1)], logprobs[i] = found[j], got[j].cpu(), lps[j]
        if hard:
            cap = self.max_constrained_beam
            beams = max(o.beam, min(cap, 1 + max(sets[i].need for i in hard)))
            if beams > o.beam:
                self._warn_once(
                    f"a glossary's terms need more beams than {o.name} has: sentences with terms search with "
                    f"as many as they need, up to {cap}"
                )
            # no shortlist here: the terms' tokens are scored over the whole vocabulary, as they must
            # be able to appear whatever the source holds
            choice = DynamicBeamAllocation(beams, [sets[i] for i in hard], self._continuations().to(src.device))
            with self.runtime.autocast(training=False):
                found, got, lps = beam_search(
                    self.models, src[hard], beams, o.length_penalty, use_cache, o.max_len, o.n_best, o.scoring,
                    o.whole_vocabulary, choice, stop,
                )  # fmt: skip
            for j, i in enumerate(hard):
                ids[i], scores[i], logprobs[i] = found[j], got[j].cpu(), lps[j]
        return ids, scores, logprobs

    def search_batch(self, o: DecodeOptions, src: torch.Tensor, use_cache: bool = True, generator=None, stop=None):
        """One batch's n-best ids, (B, N) scores and token log-probabilities: (B, S) padded source ids with <END>, as
        `batches` makes them. `generator` is for sampling (default: a fresh one seeded by o.seed);
        `stop` as `translate`'s."""
        if generator is None:
            generator = torch.Generator(device=self.device).manual_seed(o.seed)
        vocabulary = self.vocabulary(o, src)
        with self.runtime.autocast(training=False):  # autocast is per thread: set it here
            if o.beam > 1:
                return beam_search(
                    self.models, src, o.beam, o.length_penalty, use_cache, o.max_len, o.n_best, o.scoring,
                    o.whole_vocabulary, stop=stop, vocabulary=vocabulary,
                )  # fmt: skip
            # greedy or sampling: the plain loop, without beam search's reordering
            best, score, logprobs = greedy_or_sample(
                self.models,
                src,
                o.temperature,
                o.top_k,
                o.top_p,
                generator,
                use_cache,
                o.max_len,
                o.whole_vocabulary,
                stop,
                vocabulary,
            )
            return [[x] for x in best], score[:, None], [[lp] for lp in logprobs]

    def vocabulary(self, o: DecodeOptions, src: torch.Tensor) -> torch.Tensor | None:
        """(A,) the ids the outputs of (B, S) `src` may hold under the run's shortlist; None (the
        whole vocabulary) where there is none, `o.shortlist` is off or the device is not a CPU (a
        GPU computes the whole output layer as fast). Sampling ignores it (greedy_or_sample)."""
        if self.shortlist is None or not o.shortlist or self.device.type != "cpu":
            return None
        return self.shortlist.allowed(src)

    def pieces(self, ids: list[int]) -> list[str]:
        piece = getattr(self.tokenizer, "id_to_piece", None)  # subword tokenizers
        return [piece(i) for i in ids] if piece else [self.tokenizer.decode([i]) for i in ids]

    def score(
        self, sources: list[str], targets: list[str], batch_size: int = 64, scoring: str | None = None
    ) -> list[tuple[float, int]]:
        """Each target's log-probability given its source under the model(s) (forced decoding), with
        its token count (<END> included): [(total, tokens), ...] in input order. Normalised as the
        searches normalise under `scoring` (default: the run's decode.scoring)."""
        whole_vocabulary = self.options.replace(scoring=scoring).whole_vocabulary
        if len(sources) != len(targets):
            raise UserError(f"{len(sources)} sources but {len(targets)} targets")
        encoded, wanted = self.encode(sources), self.tokenizer.encode_batch(targets, "tgt")
        out = [(0.0, 0)] * len(sources)
        for rows, src in self.batches(encoded, batch_size, skip_empty=False):
            tgt = [wanted[i][: self.max_src_tokens] for i in rows]
            with self.runtime.autocast(training=False):
                totals, counts = target_logprobs(self.models, src, tgt, whole_vocabulary)
            for i, total, count in zip(rows, totals.tolist(), counts.tolist()):
                out[i] = (total, count)
        return out

    def calibrator(self) -> Calibrator:
        """The confidence calibrator of the run loaded (mt/inference/confidence.py), read once; an
        ensemble's, or a run's without one, is the untrained rule, as is said once."""
        if self._calibrator is None:
            run = self.source[0] if self.source else None
            if run is None or not isinstance(run, (str, Path)):
                self._warn_once("an ensemble has no fitted confidence calibrator: confidence is an untrained rule")
                self._calibrator = Calibrator.untrained()
            else:
                self._calibrator = calibrator_for(run, self._warn_once)
        return self._calibrator

    def forget_calibrator(self) -> None:
        """Read the calibrator again at its next use (one was just fitted)."""
        self._calibrator = None

    def confidence(self, sources: list[str], best: list[Hypothesis]) -> list[Confidence]:
        """Each translation's confidence: `best`, each source's best hypothesis from `translate`."""
        return assess(self, sources, best, self.calibrator())

    def token_logprobs(self, sources: list[str], outputs: list[list[int]], batch_size: int = 64) -> list[list[float]]:
        """Each output's (ids without <END>) tokens' log-probabilities given its source, <END>'s last,
        by forced decoding over the whole vocabulary: what a search would have given for it (one
        with a shortlist gives a little more, its softmax being over fewer pieces)."""
        whole_vocabulary = self.options.whole_vocabulary
        out: list[list[float]] = [[] for _ in sources]
        for rows, src in self.batches(self.encode(sources, warn_truncated=False), batch_size, skip_empty=False):
            with self.runtime.autocast(training=False):
                found = target_token_logprobs(self.models, src, [outputs[i] for i in rows], whole_vocabulary)
            for i, logprobs in zip(rows, found):
                out[i] = logprobs
        return out


MAX_CONSTRAINED_BEAM = 32  # the most beams a glossary's terms widen a search to


def _telling(search, progress, source_of=lambda batch: batch):
    """`search`, telling `progress` each batch's sentences once it is decoded."""

    def search_and_tell(batch):
        found = search(batch)
        progress(source_of(batch).size(0))
        return found

    return search_and_tell


def load_translator(
    models: list, engine: str = "mt", device: str = "cpu", quantize: str | None = None, precision: str = "auto"
):
    """mt's own Translator for one run or an ensemble of several, or (engine "ctranslate2") a
    CTranslate2Translator over one exported model, with the same calls."""
    if engine == "ctranslate2":
        if len(models) > 1 or quantize:
            raise UserError(
                "--engine ctranslate2 takes one exported model; quantize when exporting (--quantization int8)"
            )
        from mt.inference.ctranslate2_engine import CTranslate2Translator

        return CTranslate2Translator(models[0], "cuda" if device == "cuda" else "cpu")
    return Translator.load(models if len(models) > 1 else models[0], device, quantize, precision)

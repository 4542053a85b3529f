"""Search for translations: greedy and sampling share one loop with a different pick; beam search
reuses the same decoding step; forced decoding scores given outputs with the same numbers."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from mt.cpu import heap
from mt.data.vocab import END, PAD, SPECIALS, START
from mt.inference.quantize import Int8Linear
from mt.inference.selection import argmax_rows, topk_rows
from mt.model import move_rows_


@dataclass
class Hypothesis:
    """One translation as the searches rank it."""

    text: str
    score: float  # beam search: log-probability / length penalty; greedy and sampling: log-probability
    ids: list[int]  # subword ids, without <END>
    tokens: list[str] = field(default_factory=list)  # the subwords themselves
    logprobs: list[float] = field(default_factory=list)  # each id's log-probability, then <END>'s


class Cancelled(Exception):
    """A search stopped between steps because its `stop` said so (a request given up on)."""


def _check(stop: Callable[[], bool] | None) -> None:
    if stop is not None and stop():
        raise Cancelled("the search was stopped")


def pick_next(
    logits: torch.Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """(B, V) logits -> (B,) next ids. Temperature 0 is greedy; otherwise sample, optionally
    restricted to the k most likely tokens and/or the smallest set holding probability p."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = topk_rows(logits, top_k)[0][:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative - sorted_logits.softmax(dim=-1) >= top_p  # the first token always stays
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    probs = logits.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _finished_every(device: torch.device) -> int:
    """Steps between checks that sentences have ended. Each check waits for the GPU to catch up, so
    there it runs every 8 steps (the extra steps only pad); on CPU it is free."""
    return 1 if device.type == "cpu" else 8


def _only_end(logp: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """`logp` with `rows` forced to produce <END> (a sentence at its length limit)."""
    if logp.device.type == "cpu" and not bool(rows.any()):  # the usual case; reading it is free on CPU
        return logp
    end_only = torch.full_like(logp[0], float("-inf"))
    end_only[END] = 0.0
    return torch.where(rows[:, None], end_only, logp)


def output_limit(source_tokens, positions: int, max_len: int | None = None):
    """The most tokens (with <END>) an output may have, for a source of `source_tokens` (its <END>
    included; an int, or a tensor of them): twice its source plus 10, or `max_len` + 1, within the
    model's `positions`. The one rule of every engine: mt's searches, and CTranslate2's
    (mt/inference/ctranslate2_engine.py)."""
    wanted = 2 * source_tokens + 10 if max_len is None else source_tokens * 0 + max_len + 1
    return wanted.clamp(max=positions) if isinstance(wanted, torch.Tensor) else min(wanted, positions)


def output_limits(src: torch.Tensor, model_max_len: int, max_len: int | None = None) -> torch.Tensor:
    """(B,) `output_limit` of each (B, S) padded source, on its device (no trip to the host)."""
    return output_limit((src != PAD).sum(dim=1), model_max_len, max_len)


def _additive(mask: torch.Tensor) -> torch.Tensor:
    """A boolean key mask as the float one SDPA makes of it (0 where allowed, -inf elsewhere): SDPA
    converts a boolean mask at every call, each layer and each step, and in fp32 it takes this one
    as it is, with the same results."""
    return torch.zeros(mask.shape, device=mask.device).masked_fill(~mask, float("-inf"))


class Decoder:
    """The incremental decoding state of one model, or of an ensemble, over a batch of sources.

    `step` gives (B * beams, V) log-probabilities of the next token (an ensemble averages the
    models' probabilities); `keep` selects rows, to follow beam search's choices or to drop
    finished sentences so that later steps compute only what is still being decoded. The encoder
    memory and the cross-attention caches hold each sentence once, whatever the number of beams.

    With `vocabulary`, (A,) sorted ids (a shortlist's for this batch: mt/inference/shortlist.py),
    the output layer is computed for those alone, its rows sliced once here, and the softmax runs
    over them; `best_next` and `greedy_next` give ids of the whole vocabulary back. The specials
    must be among them (they keep their places: <pad>, <START> and <END> are ids 0, 2, 3 of both)."""

    def __init__(
        self,
        models,
        src: torch.Tensor,
        steps: int,
        use_cache: bool = True,
        beams: int = 1,
        whole_vocabulary=False,
        vocabulary: torch.Tensor | None = None,
    ):
        self.models = models if isinstance(models, (list, tuple)) else [models]
        # whole_vocabulary: <START>, which is Marian's <pad>, stays in the softmax and is then banned,
        # as transformers bans it after its log-softmax; else neither <pad> nor <START> is in it
        self.start_in_softmax = whole_vocabulary
        self.memories, self.masks, self.caches = [], [], []
        for model in self.models:
            memory, mask = model.encode(src)  # (B, S, D), (B, 1, 1, S)
            self.memories.append(memory)
            fp32 = memory.dtype == torch.float32 and not torch.is_autocast_enabled(src.device.type)
            self.masks.append(_additive(mask) if fp32 else mask)
            self.caches.append(model.new_cache(memory, steps, beams) if use_cache else None)
        self.vocab = self.models[0].embed.tokens.num_embeddings  # the output size: A with a shortlist
        self.heads = [model.head for model in self.models]
        self.ids: torch.Tensor | None = None  # (A,) the whole vocabulary's id of each output, with a shortlist
        if vocabulary is not None:
            self._restrict(vocabulary)

    def _restrict(self, ids: torch.Tensor) -> None:
        specials = torch.arange(len(SPECIALS), device=ids.device)
        if ids.numel() < len(SPECIALS) or not bool((ids[: len(SPECIALS)] == specials).all()):
            raise ValueError("a shortlist's vocabulary must start with every special id")
        self.ids, self.vocab = ids, ids.numel()
        self.heads = [_head_rows(model.head, ids) for model in self.models]

    @property
    def cached(self) -> bool:
        return self.caches[0] is not None

    def step(self, tokens: torch.Tensor, last_only: bool = True, normalize: bool = True) -> torch.Tensor:
        """(B, 1) newest tokens (or, without a cache, (B, T) whole prefixes) -> (B, V) float
        log-probabilities of the next token, or (B, T, V) for every position with last_only=False;
        <pad> and <START> are never produced. normalize=False leaves one model's logits as they are.
        Over the whole vocabulary: sampling and forced scoring make their Decoder without `vocabulary`."""
        if self.ids is not None:
            raise ValueError("Decoder.step gives the whole vocabulary's scores; this one has a shortlist")
        return self._scores(self._states(tokens, last_only), slice(None), normalize)

    def best_next(
        self, tokens: torch.Tensor, count: int, forced: torch.Tensor, extra: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, ...]:
        """Each row's `count` most likely next tokens, (B, count) log-probabilities and ids, best
        first; rows `forced` (at their length limit) produce <END> alone. With `extra`, (B, M)
        token ids, their log-probabilities too, (B, M). Computed in slices of rows
        (`_row_slices`), so the whole (B, V) log-probabilities never exist at once on a CPU. `extra`
        needs the whole vocabulary: constrained search decodes without a shortlist."""
        if extra is not None and self.ids is not None:
            raise ValueError("extra tokens are scored over the whole vocabulary; this Decoder has a shortlist")
        states = self._states(tokens)
        count = min(count, self.vocab)
        parts = []
        for rows in self._slices(states):
            logp = _only_end(self._scores(states, rows), forced[rows])
            top_logp, top = topk_rows(logp, count)
            top = top if self.ids is None else self.ids[top]
            parts.append((top_logp, top) if extra is None else (top_logp, top, logp.gather(1, extra[rows])))
        return _joined(parts)

    def greedy_next(self, tokens: torch.Tensor, forced: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's most likely next token and its log-probability, (B,) each (<END> and 0 where
        `forced`), in slices of rows as `best_next`."""
        states = self._states(tokens)
        raw = not self.start_in_softmax  # logits: the argmax first, one log-softmax for the pick after
        picks = [
            _greedy_pick(self._scores(states, rows, normalize=not raw), forced[rows], normalized=not raw)
            for rows in self._slices(states)
        ]
        nxt, logp = _joined(picks)
        return (nxt if self.ids is None else self.ids[nxt]), logp

    def _states(self, tokens: torch.Tensor, last_only: bool = True) -> list[torch.Tensor]:
        """Each model's decoder output before its output layer: (B, D), or (B, T, D) with last_only=False."""
        states = []
        for model, memory, mask, cache in zip(self.models, self.memories, self.masks, self.caches):
            h = model.decoder_states(tokens, memory, mask, cache)
            states.append(h[:, -1] if last_only else h)
        return states

    def _slices(self, states: list[torch.Tensor]) -> list[slice]:
        return _row_slices(states[0].size(0), self.vocab, states[0].device)

    def _scores(self, states: list[torch.Tensor], rows: slice, normalize: bool = True) -> torch.Tensor:
        """Rows `rows` of the next-token log-probabilities (an ensemble averages the models'
        probabilities); normalize=False leaves one model's logits as they are (greedy takes their
        argmax before it normalises)."""
        outs = []
        for head, h in zip(self.heads, states):
            logits = head(h[rows]).float()
            logits[..., PAD] = float("-inf")  # plain slices: no index tensor to copy over
            if not self.start_in_softmax:
                logits[..., START] = float("-inf")
            outs.append(_log_softmax_(logits) if normalize or len(self.models) > 1 else logits)
        scores = outs[0] if len(outs) == 1 else torch.logsumexp(torch.stack(outs), dim=0) - math.log(len(outs))
        if self.start_in_softmax:
            scores[..., START] = float("-inf")  # counted in the softmax, never produced
        return scores

    def keep(self, rows: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        """Keep decoding rows `rows`, in that order, and, when sentences leave the batch, sentences
        `sentences` of the memory (for greedy decoding the same as `rows`). Beam search's
        reordering within a sentence leaves the memory alone: all its beams share it. Where no
        row is read after it is overwritten, only the rows that change are copied, in place."""
        moves = _moves(rows)
        sentence_moves = moves if sentences is rows else _moves(sentences) if sentences is not None else None
        for i, cache in enumerate(self.caches):
            if sentences is not None:
                self.memories[i] = _kept(self.memories[i], sentences, sentence_moves)
                self.masks[i] = _kept(self.masks[i], sentences, sentence_moves)
            for self_cache, cross_cache in cache or []:
                if moves is not None and rows.numel() <= self_cache.k.size(0):
                    self_cache.move_rows(*moves, rows.numel())
                else:
                    self_cache.reorder(rows)
                if sentences is None:
                    continue
                if sentence_moves is not None:
                    cross_cache.move_rows(*sentence_moves, sentences.numel())
                else:
                    cross_cache.reorder(sentences)


def _head_rows(head, ids: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """An output layer's rows `ids` (A,) as a layer of their own, (.., D) -> (.., A): sliced once a
    batch, so each step multiplies by A rows instead of V (int8 ones packed again as int8)."""
    if isinstance(head, Int8Linear):
        return head.rows(ids)
    bias = None if head.bias is None else head.bias[ids]
    return functools.partial(F.linear, weight=head.weight[ids], bias=bias)


# On a CPU the next-token scores of a step are computed in equal slices of rows when the whole
# (rows, V) float matrix would take more than this: glibc maps every block over its largest mmap
# threshold afresh, zeroed page by page, which made page faults a large share of beam search over
# OPUS-MT's vocabulary. Small vocabularies take one slice, as on a GPU, whose allocator keeps blocks.
SCORES_SLICE_BYTES = heap.MMAP_THRESHOLD * 7 // 8


def _log_softmax_(logits: torch.Tensor) -> torch.Tensor:
    """Log-probabilities over the last dimension, written over `logits` on a CPU: the same numbers
    as a new tensor, without a second buffer of scores to fill. Elsewhere, or where autograd tracks
    the logits, a new tensor."""
    if logits.device.type != "cpu" or logits.requires_grad:
        return logits.log_softmax(dim=-1)
    return torch.log_softmax(logits, dim=-1, out=logits)


def _row_slices(rows: int, vocab: int, device: torch.device) -> list[slice]:
    if device.type != "cpu":
        return [slice(0, rows)]
    pieces = max(1, math.ceil(rows * vocab * 4 / SCORES_SLICE_BYTES))
    size = math.ceil(rows / pieces)
    return [slice(start, start + size) for start in range(0, rows, size)]


def _joined(parts: list[tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
    """Tuples of tensors from slices of rows, joined along the rows (one slice: as it is)."""
    if len(parts) == 1:
        return parts[0]
    return tuple(torch.cat(column) for column in zip(*parts))


def _kept(held: torch.Tensor, rows: torch.Tensor, moves: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """Rows `rows` of `held`: in place, moving only the rows that change, where `moves` allows it."""
    if moves is None:
        return held[rows]
    move_rows_(held, *moves)
    return held[: rows.numel()]


def _survivors(done: torch.Tensor) -> torch.Tensor:
    """The rows still decoding, in an order that moves fewest: with k survivors, each finished row
    among the first k takes a survivor from beyond them, and every other survivor keeps its row.
    Their order is free, since each row's original index travels with it."""
    kept = int((~done).sum())
    order = torch.arange(kept, device=done.device)
    holes = done[:kept].nonzero().squeeze(1)
    order[holes] = (~done[kept:]).nonzero().squeeze(1) + kept
    return order


def _moves(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(destination rows, source rows) of the rows that `rows` changes, when no row is read after
    it is overwritten (no destination is also a source): then the caches can move just those rows."""
    if rows.device.type != "cpu":  # the check below would wait for the GPU; its memory is fast anyway
        return None
    dst = (rows != torch.arange(rows.numel(), device=rows.device)).nonzero().squeeze(1)
    src = rows[dst]
    return None if bool(torch.isin(src, dst).any()) else (dst, src)


def target_logprobs(
    models, src: torch.Tensor, targets: list[list[int]], whole_vocabulary: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forced decoding: the log-probability of each given target (ids without <END>; <END> is
    scored too) under the model(s), as (B,) totals and (B,) token counts. The same numbers the
    searches add up, so scoring a search's output gives back its score."""
    picked, keep = _forced(models, src, targets, whole_vocabulary)
    return picked.sum(dim=1), keep.sum(dim=1)


def target_token_logprobs(
    models, src: torch.Tensor, targets: list[list[int]], whole_vocabulary: bool = False
) -> list[list[float]]:
    """Forced decoding, token by token: each target's tokens' log-probabilities, <END>'s last, as
    the searches give them for their own outputs (`Hypothesis.logprobs`)."""
    picked, _ = _forced(models, src, targets, whole_vocabulary)
    return [row[: len(t) + 1] for t, row in zip(targets, picked.tolist())]


@torch.no_grad()
def _forced(models, src: torch.Tensor, targets: list[list[int]], whole_vocabulary: bool):
    """(B, T) each target token's log-probability (0 past <END>) and (B, T) where a token is."""
    width = max(len(t) for t in targets) + 1
    tgt_in = torch.full((len(targets), width), PAD, dtype=torch.long)
    tgt_out = torch.full_like(tgt_in, PAD)
    for j, ids in enumerate(targets):
        tgt_in[j, : len(ids) + 1] = torch.tensor([START] + ids)
        tgt_out[j, : len(ids) + 1] = torch.tensor(ids + [END])
    tgt_in, tgt_out = tgt_in.to(src.device), tgt_out.to(src.device)
    logp = Decoder(models, src, width, use_cache=False, whole_vocabulary=whole_vocabulary).step(tgt_in, last_only=False)
    picked = logp.gather(2, tgt_out.clamp(min=0)[:, :, None]).squeeze(2)  # (B, T)
    keep = tgt_out != PAD
    return torch.where(keep, picked, 0.0), keep


def _max_positions(models) -> int:
    return min(m.max_len for m in (models if isinstance(models, (list, tuple)) else [models]))


def _worth_shrinking(finished: int, rows: int) -> bool:
    """Drop finished rows once they are an eighth of the batch. Each drop moves only the last rows
    into the finished ones' places (`_survivors`), but dropping at every chance was no faster (int8
    beam 5 on test_2016: the rows it saves are mostly in late, narrow steps), and int8 outputs would
    change with it: dynamic quantization scales each step's activations by the whole batch's range."""
    return finished > 0 and finished * 8 >= rows


@torch.no_grad()
def greedy_or_sample(
    models,
    src: torch.Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    max_len: int | None = None,
    whole_vocabulary: bool = False,
    stop: Callable[[], bool] | None = None,
    vocabulary: torch.Tensor | None = None,
) -> tuple[list[list[int]], torch.Tensor, list[list[float]]]:
    """Decode (B, S) sources one token at a time with the KV cache (use_cache=False re-runs the
    decoder over the whole prefix each step: only for measuring what the cache saves). Finished
    sentences leave the batch. Returns the ids of each output (without <END>), each output's
    log-probability under the model, and its tokens' (<END>'s last). `stop`, asked before each
    step, raises `Cancelled` when true.
    `vocabulary`, (A,) ids: a shortlist for greedy decoding (`Decoder`); sampling ignores it and
    draws from the whole vocabulary, the model's own distribution."""
    limits = output_limits(src, _max_positions(models), max_len)  # (B,)
    b, steps = src.size(0), int(limits.max())
    vocabulary = None if temperature > 0 else vocabulary
    state = Decoder(models, src, steps, use_cache, whole_vocabulary=whole_vocabulary, vocabulary=vocabulary)
    out = torch.full((b, steps), PAD, dtype=torch.long, device=src.device)
    gains = torch.zeros((b, steps), device=src.device)  # each token's log-probability
    live = torch.arange(b, device=src.device)  # the original row of each row still decoding
    tokens = torch.full((b, 1), START, dtype=torch.long, device=src.device)
    done = torch.zeros(b, dtype=torch.bool, device=src.device)
    check_every = _finished_every(src.device)
    for t in range(steps):
        _check(stop)
        inputs = tokens if state.cached else torch.cat([torch.full_like(tokens, START), out[live, :t]], dim=1)
        forced = limits[live] == t + 1  # at the length limit: <END>
        if temperature > 0:
            logp = _only_end(state.step(inputs), forced)  # (b, V)
            nxt = pick_next(logp, temperature, top_k, top_p, generator)
            gain = logp.gather(1, nxt[:, None]).squeeze(1)
        else:
            nxt, gain = state.greedy_next(inputs, forced)
        nxt = torch.where(done, PAD, nxt)  # (b,)
        gains[live, t] = torch.where(done, 0.0, gain)
        out[live, t] = nxt
        done |= nxt == END
        if (t + 1) % check_every == 0:
            finished = int(done.sum())
            if finished == len(live):
                break
            if _worth_shrinking(finished, len(live)):
                rows = _survivors(done)
                state.keep(rows, rows)
                live, nxt, done = live[rows], nxt[rows], done[rows]
        tokens = nxt[:, None]
    ids = [_until_end(row) for row in out.tolist()]
    return ids, gains.sum(dim=1), [row[: len(x) + 1] for x, row in zip(ids, gains.tolist())]


def _greedy_pick(
    scores: torch.Tensor, forced: torch.Tensor, normalized: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The argmax of the (B, V) logits (or log-probabilities, `normalized`), and its log-probability
    (0 where <END> is forced): the number forced decoding gives. From logits, a log-softmax after
    the argmax, which on CPU is faster than subtracting `logsumexp` (three passes and a temporary)."""
    nxt = torch.where(forced, END, argmax_rows(scores))
    logp = scores if normalized else _log_softmax_(scores)  # the logits are not read again
    gain = logp.gather(1, nxt[:, None]).squeeze(1)
    return nxt, torch.where(forced, 0.0, gain)


def _until_end(ids: list[int]) -> list[int]:
    return ids[: ids.index(END)] if END in ids else ids


def length_penalty_of(length: torch.Tensor | int, alpha: float, scoring: str = "gnmt"):
    """What a hypothesis of `length` tokens (<END> included) has its log-probability divided by:
    GNMT's ((5 + length) / 6) ** alpha, or (scoring 'marian') length ** alpha, as transformers and
    Marian divide."""
    return (length if scoring == "marian" else (5.0 + length) / 6.0) ** alpha


class _Finished:
    """Each live sentence's `n` best finished hypotheses: normalised scores (n_sent, N), ids and
    running log-probabilities (n_sent, N, T), the total after each token."""

    def __init__(self, sentences: int, n: int, steps: int, device):
        self.scores = torch.full((sentences, n), float("-inf"), device=device)
        self.ids = torch.full((sentences, n, steps), PAD, dtype=torch.long, device=device)
        self.totals = torch.zeros((sentences, n, steps), device=device)

    def add(self, scores: torch.Tensor, ids: torch.Tensor, totals: torch.Tensor) -> None:
        """Merge candidates (n_sent, C) scored -inf where not finished, keeping the N best."""
        n = self.scores.size(1)
        self.scores, pick = torch.cat([self.scores, scores], dim=1).topk(n, dim=1)
        for name, new in (("ids", ids), ("totals", totals)):
            merged = torch.cat([getattr(self, name), new], dim=1)
            setattr(self, name, merged.gather(1, pick[:, :, None].expand(-1, -1, merged.size(2))))

    def select(self, rows: torch.Tensor) -> None:
        self.scores, self.ids, self.totals = self.scores[rows], self.ids[rows], self.totals[rows]

    def logprobs(self, lengths: list[list[int]]) -> list[list[list[float]]]:
        """Each kept hypothesis's token log-probabilities, its first `lengths` tokens (<END> included)."""
        steps = torch.diff(self.totals, dim=2, prepend=self.totals.new_zeros(self.totals.shape[:2] + (1,)))
        return [[row[:n] for row, n in zip(rows, ns)] for rows, ns in zip(steps.tolist(), lengths)]


@dataclass
class Choice:
    """What a beam-search step chose, per live sentence: candidates (n, C) that finish here (their
    total log-probabilities, the rows they extend, and where they finish), and the K that go on
    (n, K): their totals, the rows they extend and their tokens."""

    candidate_scores: torch.Tensor
    candidate_rows: torch.Tensor
    finishing: torch.Tensor
    scores: torch.Tensor
    rows: torch.Tensor
    tokens: torch.Tensor
    offsets: torch.Tensor | None = None  # (n, C) added to a finishing candidate's normalised score


class TopK:
    """Plain beam search's step: the K best one-token extensions of a sentence's beams go on, and
    those among them that end finish. Strategies over the same step (mt/inference/constraints.py)
    keep this shape: what they score besides each row's best tokens, what they choose, and the state
    they keep per beam, which follows the beams as the search reorders and drops them."""

    def __init__(self, beam: int):
        self.k = beam

    def extra_tokens(self) -> torch.Tensor | None:
        return None  # (rows, M) token ids to score besides each row's best, for strategies that need them

    def choose(self, scores, top_logp, top_tokens, extra_logp, forced, done) -> Choice:
        k = self.k
        top_scores, origin, token = _best_extensions(scores, top_logp, top_tokens, 2 * k)  # (n, 2K) each
        ended = token == END
        first_k = torch.arange(2 * k, device=scores.device) < k  # only ends among the K best finish
        kept, keep = torch.where(ended, float("-inf"), top_scores).topk(k, dim=1)  # (n, K): the K that go on
        return Choice(
            top_scores, origin, ended & first_k & ~done[:, None], kept, origin.gather(1, keep), token.gather(1, keep)
        )

    def reorder(self, order: torch.Tensor) -> None:
        """The beams of each sentence were put in `order` (n, K)."""

    def keep(self, live: torch.Tensor) -> None:
        """Only the sentences `live` go on."""

    def settle(self, scores: torch.Tensor) -> torch.Tensor:
        """The final (B, N) scores, as the strategy reports them."""
        return scores


@torch.no_grad()
def beam_search(
    models,
    src: torch.Tensor,
    beam: int,
    length_penalty: float = 1.0,
    use_cache: bool = True,
    max_len: int | None = None,
    n_best: int = 1,
    scoring: str = "gnmt",
    whole_vocabulary: bool | None = None,
    choice: TopK | None = None,
    stop: Callable[[], bool] | None = None,
    vocabulary: torch.Tensor | None = None,
) -> tuple[list[list[list[int]]], torch.Tensor, list[list[list[float]]]]:
    """Batched beam search: hypotheses ending among the `beam` best candidates finish, scored by
    log-probability / length penalty (`scoring`: `length_penalty_of`). A sentence is done when the
    worst of its finished hypotheses it keeps beats every live beam at the current length: it keeps
    `n_best` (gnmt), or `beam` as transformers' beam search does (marian). Returns each sentence's
    `n_best` ids (no <END>), best first, (B, N) scores, and each one's token log-probabilities
    (<END>'s last). `whole_vocabulary`: as
    DecodeOptions.whole_vocabulary (default: as `scoring` says). `choice`: what each step keeps
    (default `TopK`; constrained search: mt/inference/constraints.py). `stop`, asked before each
    step, raises `Cancelled` when true: a request given up on stops using the CPU. `vocabulary`, (A,)
    ids: the batch's shortlist (`Decoder`); scores are then log-probabilities under a softmax over
    those ids. A `choice` that scores extra tokens needs the whole vocabulary."""
    k, device, b = beam, src.device, src.size(0)
    choice = choice or TopK(k)
    whole_vocabulary = scoring == "marian" if whole_vocabulary is None else whole_vocabulary
    limits = output_limits(src, _max_positions(models), max_len)  # (B,)
    steps = int(limits.max())
    # one row a sentence at step 0
    state = Decoder(models, src, steps, use_cache, whole_vocabulary=whole_vocabulary, vocabulary=vocabulary)
    kept = k if scoring == "marian" else n_best
    result = _Finished(b, kept, steps, device)
    finished = _Finished(b, kept, steps, device)  # for the sentences still in the batch
    sent = torch.arange(b, device=device)  # the original index of each live sentence
    tokens = torch.full((b, 1), START, dtype=torch.long, device=device)  # all beams start alike: step 0 runs once
    history = torch.full((b * k, steps), PAD, dtype=torch.long, device=device)
    totals = torch.zeros((b * k, steps), device=device)  # each beam's log-probability after each token
    scores = torch.zeros((b, 1), device=device)  # one beam a sentence until the first step has run
    done = torch.zeros(b, dtype=torch.bool, device=device)
    check_every = _finished_every(device)
    for t in range(steps):
        _check(stop)
        n = sent.size(0)
        prefix = history[:, :t]  # without a cache the decoder reads the whole prefix again
        inputs = tokens if state.cached or t == 0 else torch.cat([torch.full_like(prefix[:, :1], START), prefix], 1)
        width = inputs.size(0) // n  # beams per sentence in this step: 1 at the first, then K
        forced = (limits[sent] == t + 1).repeat_interleave(width)  # (n*width,)
        chosen = _choose(state, choice, inputs, scores[:, :width], forced.view(n, width), done, k)
        lp = length_penalty_of(t + 1, length_penalty, scoring)
        _add_finished(finished, chosen, lp, history, totals, t)
        done |= finished.scores[:, -1] >= chosen.scores.max(dim=1).values / lp
        scores, rows, new_tokens = _going_on(chosen, choice, width == k and device.type == "cpu")  # (n, K) each
        checked = (t + 1) % check_every == 0
        if checked and bool(done.all()):
            break
        live = _finished_leave(done, result, finished, sent, choice) if checked else None
        if live is not None:
            sent, done, scores, rows, new_tokens = (x[live] for x in (sent, done, scores, rows, new_tokens))
        rows, new_tokens = rows.view(-1), new_tokens.view(-1)
        history, totals = history[rows], totals[rows]
        history[:, t], totals[:, t] = new_tokens, scores.reshape(-1)
        state.keep(rows, live)
        tokens = new_tokens[:, None]
    _store(result, finished, sent, torch.arange(sent.size(0), device=device))
    ids = [[_until_end(h) for h in sentence[:n_best]] for sentence in result.ids.tolist()]
    logprobs = result.logprobs([[len(h) + 1 for h in sentence] for sentence in ids])
    return ids, choice.settle(result.scores[:, :n_best]), logprobs


def _choose(state: Decoder, choice: TopK, inputs, scores, forced, done, k: int) -> Choice:
    """One step's choice: each row's 2K best next tokens (and those the strategy asks for besides)
    scored, and `choice` picking among them. `scores` (n, width), `forced` (n, width): a row at its
    length limit."""
    n, width = forced.shape
    extra = choice.extra_tokens()
    top_logp, top_tokens, *extra_logp = state.best_next(inputs, 2 * k, forced.view(-1), extra)  # (n*width, 2K) each
    return choice.choose(scores, top_logp, top_tokens, extra_logp[0] if extra_logp else None, forced[:, 0], done)


def _going_on(chosen: Choice, choice: TopK, in_parent_rows: bool) -> tuple[torch.Tensor, ...]:
    """The (n, K) scores, rows and tokens of the beams that go on; `in_parent_rows`: each put in its
    parent's row where it can (`_in_parent_rows`), so that the caches move fewer rows."""
    scores, rows, tokens = chosen.scores, chosen.rows, chosen.tokens
    if in_parent_rows:
        order = _in_parent_rows(rows)
        scores, rows, tokens = (x.gather(1, order) for x in (scores, rows, tokens))
        choice.reorder(order)
    return scores, rows, tokens


def _finished_leave(done, result: _Finished, finished: _Finished, sent, choice) -> torch.Tensor | None:
    """Where enough sentences are done (`_worth_shrinking`), their hypotheses go to `result` and the
    rest stay: the rows that do (`_survivors`), else None."""
    if not _worth_shrinking(int(done.sum()), done.size(0)):
        return None
    live = _survivors(done)
    _store(result, finished, sent, done.nonzero().squeeze(1))
    finished.select(live)
    choice.keep(live)
    return live


def _in_parent_rows(rows: torch.Tensor) -> torch.Tensor:
    """An order for each sentence's K new beams, given the (n, K) rows they extend: each parent's
    first child takes the parent's own row, the other children the rows of parents left without
    any. The order of a sentence's beams is free; in this one the caches copy only the rows that
    change (a quarter of them in beam 5 on test_2016, against half when the best comes first)."""
    n, k = rows.shape
    beams = torch.arange(k, device=rows.device)
    parent = rows - torch.arange(n, device=rows.device)[:, None] * k  # (n, K): beam index in its sentence
    earlier_sibling = (parent[:, :, None] == parent[:, None, :]) & (beams[None, :] < beams[:, None])
    first = ~earlier_sibling.any(dim=2)  # (n, K)
    childless = torch.ones(n, k, dtype=torch.bool, device=rows.device).scatter_(1, parent, False)
    free = torch.argsort((~childless).to(torch.uint8), dim=1, stable=True)  # childless rows first, in order
    rank = ((~first).cumsum(dim=1) - 1).clamp(min=0)
    slot = torch.where(first, parent, free.gather(1, rank))  # (n, K): the row each new beam takes
    return torch.empty_like(slot).scatter_(1, slot, beams.expand(n, k))  # (n, K): the beam each row takes


def _add_finished(finished: _Finished, chosen: Choice, lp: float, history, totals, t: int) -> None:
    """A step's candidates (n, C) that end here (`chosen.finishing`, where their score is finite)
    join their sentences' finished hypotheses, scored by log-probability / length penalty `lp`."""
    final = chosen.finishing & chosen.candidate_scores.isfinite()
    if history.device.type == "cpu" and not bool(final.any()):  # most steps finish nothing; reading that is free on CPU
        return
    rows = chosen.candidate_rows.view(-1)
    candidates = history[rows].view(*final.shape, history.size(1))
    candidates[:, :, t] = END
    running = totals[rows].view(*final.shape, totals.size(1))
    running[:, :, t] = torch.where(final, chosen.candidate_scores, 0.0)
    normalised = chosen.candidate_scores / lp + (0.0 if chosen.offsets is None else chosen.offsets)
    finished.add(torch.where(final, normalised, float("-inf")), candidates, running)


def _best_extensions(scores: torch.Tensor, top_logp: torch.Tensor, top_tokens: torch.Tensor, count: int):
    """The `count` best one-token extensions of each sentence's beams, from (n, K) beam scores and
    each beam's own best next tokens, (n*K, C) log-probabilities and ids: (n, count) total
    log-probabilities, the rows they extend and their tokens. Only a beam's own `count` best tokens
    can be among them, so the sentence-wide choice runs over K * C numbers, not K * V."""
    n, k = scores.shape
    per_beam = top_logp.size(1)
    totals = (scores.view(-1, 1) + top_logp).view(n, -1)  # (n, K*C)
    if totals.size(1) < count:  # one beam's first step over fewer pieces than `count`: pad with the
        # impossible candidates that K alike beams at -inf would have added; they stand for the last real one
        totals = torch.cat([totals, totals.new_full((n, count - totals.size(1)), float("-inf"))], dim=1)
    best, pick = totals.topk(count, dim=1)  # (n, count)
    pick = pick.clamp(max=k * per_beam - 1)
    rows = pick // per_beam + torch.arange(n, device=scores.device)[:, None] * k
    return best, rows, top_tokens.view(n, -1).gather(1, pick)


def _store(result: _Finished, finished: _Finished, sent: torch.Tensor, rows: torch.Tensor) -> None:
    result.scores[sent[rows]] = finished.scores[rows]
    result.ids[sent[rows]] = finished.ids[rows]
    result.totals[sent[rows]] = finished.totals[rows]

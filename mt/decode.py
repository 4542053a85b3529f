"""Decoding: greedy and sampling share one loop with a different pick; beam search reuses the step."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from mt.errors import UserError
from mt.tokenizer import END, PAD, SPECIALS, START


def check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """One place for the sampling options' ranges: a bad value is a one-line UserError."""
    if temperature < 0:
        raise UserError(f"temperature must be >= 0 (0 is greedy), got {temperature}")
    if top_k is not None and top_k < 1:
        raise UserError(f"top-k must be a positive number of tokens, got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise UserError(f"top-p must be a probability in (0, 1], got {top_p}")


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
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative - sorted_logits.softmax(dim=-1) >= top_p  # the first token always stays
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    probs = logits.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate_lm(
    model: torch.nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Iterator[int]:
    """Continue (1, T) ids from a language model, yielding each new id; the context is cropped
    to the model's block size."""
    for _ in range(max_new_tokens):
        context = idx[:, -model.block_size :]  # (1, <= block_size)
        logits = model(context)[:, -1]  # (1, V)
        logits[:, : len(SPECIALS)] = float("-inf")  # plain text never holds <pad>, <unk>, <START>, <END>
        nxt = pick_next(logits, temperature, top_k, top_p, generator)  # (1,)
        idx = torch.cat([idx, nxt[:, None]], dim=1)
        yield int(nxt)


def _finished_every(device: torch.device) -> int:
    """Steps between checks that every sentence has ended. Each check waits for the GPU to catch
    up, so there it runs every 8 steps (the extra steps only pad); on CPU it is free."""
    return 1 if device.type == "cpu" else 8


def _only_end(logp: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """`logp` with `rows` forced to produce <END> (a sentence at its length limit)."""
    end_only = torch.full_like(logp[0], float("-inf"))
    end_only[END] = 0.0
    return torch.where(rows[:, None], end_only, logp)


def output_limits(src: torch.Tensor, model_max_len: int) -> torch.Tensor:
    """(B,) the most tokens (with <END>) each sentence may produce: twice its source plus 10,
    within the model's positions."""
    src_len = (src != PAD).sum(dim=1)
    return torch.clamp(2 * src_len + 10, max=model_max_len)


def _step_logits(model, tokens, memory, src_mask, cache) -> torch.Tensor:
    """(B, 1) newest tokens -> (B, V) float log-probabilities; <pad> and <START> are never produced."""
    logits = model.decode(tokens, memory, src_mask, cache)[:, -1].float()
    logits[:, PAD] = logits[:, START] = float("-inf")  # plain slices: no index tensor to copy over
    return logits.log_softmax(dim=-1)


@torch.no_grad()
def greedy_or_sample(
    model, src: torch.Tensor, temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
    generator: torch.Generator | None = None, use_cache: bool = True,
) -> tuple[list[list[int]], torch.Tensor]:
    """Decode (B, S) sources one token at a time with the KV cache (use_cache=False re-runs the
    decoder over the whole prefix each step: only for measuring what the cache saves). Returns the
    ids of each output (without <END>) and each output's log-probability under the model."""
    memory, src_mask = model.encode(src)  # (B, S, D), (B, 1, 1, S)
    limits = output_limits(src, model.max_len)  # (B,)
    b, steps = src.size(0), int(limits.max())
    cache = model.new_cache(memory, steps) if use_cache else None
    tokens = torch.full((b, 1), START, dtype=torch.long, device=src.device)
    out = torch.full((b, steps), PAD, dtype=torch.long, device=src.device)
    score = torch.zeros(b, device=src.device)
    done = torch.zeros(b, dtype=torch.bool, device=src.device)
    check_every = _finished_every(src.device)
    for t in range(steps):
        inputs = tokens if use_cache else torch.cat([torch.full_like(tokens, START), out[:, :t]], dim=1)
        logp = _step_logits(model, inputs, memory, src_mask, cache)  # (B, V)
        logp = _only_end(logp, limits == t + 1)
        nxt = pick_next(logp, temperature, top_k, top_p, generator)  # (B,)
        nxt = torch.where(done, PAD, nxt)
        score += torch.where(done, 0.0, logp.gather(1, nxt[:, None]).squeeze(1))
        out[:, t] = nxt
        done |= nxt == END
        if (t + 1) % check_every == 0 and bool(done.all()):
            break
        tokens = nxt[:, None]
    return [_until_end(row) for row in out.tolist()], score


def _until_end(ids: list[int]) -> list[int]:
    return ids[: ids.index(END)] if END in ids else ids


def _length_penalty(length: torch.Tensor | int, alpha: float):
    """GNMT length normalisation: ((5 + length) / 6) ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def beam_search(
    model, src: torch.Tensor, beam: int, length_penalty: float = 1.0, use_cache: bool = True
) -> tuple[list[list[int]], torch.Tensor]:
    """Batched beam search over the same cached step. Hypotheses ending among the `beam` best
    candidates are finished, scored by log-probability / length_penalty; a sentence is done when
    its best finished score beats every live beam at the current length. With beam 1 this is
    greedy. Returns each best output's ids (without <END>) and its normalised score."""
    k, device = beam, src.device
    memory, src_mask = model.encode(src)
    b = src.size(0)
    limits = output_limits(src, model.max_len)  # (B,)
    steps = int(limits.max())
    memory, src_mask = memory.repeat_interleave(k, 0), src_mask.repeat_interleave(k, 0)  # (B*K, S, D)
    cache = model.new_cache(memory, steps) if use_cache else None
    tokens = torch.full((b * k, 1), START, dtype=torch.long, device=device)
    history = torch.full((b * k, steps), PAD, dtype=torch.long, device=device)
    scores = torch.full((b, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start identical: expand only the first
    best_score = torch.full((b,), float("-inf"), device=device)
    best_ids = torch.full((b, steps), PAD, dtype=torch.long, device=device)
    done = torch.zeros(b, dtype=torch.bool, device=device)
    base = torch.arange(b, device=device)[:, None] * k  # (B, 1) row of each sentence's first beam
    first_k = torch.arange(2 * k, device=device) < k  # (2K,)
    check_every = _finished_every(device)
    for t in range(steps):
        inputs = tokens if use_cache else torch.cat([torch.full_like(tokens, START), history[:, :t]], dim=1)
        logp = _step_logits(model, inputs, memory, src_mask, cache)  # (B*K, V)
        v = logp.size(1)
        logp = _only_end(logp, (limits == t + 1).repeat_interleave(k))
        cand = (scores.view(-1, 1) + logp).view(b, k * v)  # (B, K*V)
        top_scores, top_idx = cand.topk(2 * k, dim=1)  # (B, 2K): enough to keep K that go on
        origin, token = top_idx // v, top_idx % v
        ended = token == END
        final = ended & first_k & ~done[:, None] & top_scores.isfinite()
        lp = _length_penalty(t + 1, length_penalty)
        normalised = torch.where(final, top_scores / lp, float("-inf"))
        cand_best, cand_rank = normalised.max(dim=1)  # (B,)
        better = cand_best > best_score  # (B,) updated without reading it on the host
        rows = base.squeeze(1) + origin.gather(1, cand_rank[:, None]).squeeze(1)  # (B,)
        best_ids = torch.where(better[:, None], history[rows], best_ids)
        best_ids[:, t] = torch.where(better, END, best_ids[:, t])
        best_score = torch.where(better, cand_best, best_score)
        # The K best candidates that do not end go on.
        scores, keep = torch.where(ended, float("-inf"), top_scores).topk(k, dim=1)  # (B, K), best first
        done |= best_score >= scores[:, 0] / lp
        if (t + 1) % check_every == 0 and bool(done.all()):
            break
        rows = (base + origin.gather(1, keep)).view(-1)  # (B*K,) beams they extend
        new_tokens = token.gather(1, keep).view(-1)
        history = history[rows]
        history[:, t] = new_tokens
        for self_cache, _ in cache or []:  # cross-attention keys are the same within a sentence
            self_cache.reorder(rows)
        tokens = new_tokens[:, None]
    return [_until_end(row) for row in best_ids.tolist()], best_score

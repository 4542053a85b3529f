"""Decoding: greedy and sampling share one loop with a different pick; beam search reuses the step."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from mt.tokenizer import SPECIALS


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

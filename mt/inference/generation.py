"""Language-model generation: continue a prompt one token at a time with the shared pick."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from mt.data.vocab import SPECIALS
from mt.inference.search import pick_next


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

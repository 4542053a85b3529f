"""Cross-attention of a translation, to look at (a heatmap) and to use (word alignments).

The weights are recomputed after decoding by one teacher-forced pass over the chosen output, with
a hook on one decoder layer's cross-attention: decoding itself keeps using fused attention, which
never materialises the weights.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import torch
import torch.nn.functional as F

from mt.data.vocab import END, START
from mt.errors import UserError, require_extra


def _weights(attn, x: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, H, T, S) softmax weights of a cross-attention module for queries x over memory."""
    d = x.size(-1)
    q = attn._heads(F.linear(x, *attn.projection("q")))
    k = attn._heads(F.linear(memory, *attn.projection("kv")).split(d, dim=2)[0])
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)


def _this_thread(record):
    """A forward hook that records only the calls of the thread that made it: a server decodes
    other requests with the same modules on other threads while a document is aligned."""
    owner = threading.get_ident()

    def hook(module, args, kwargs, output):
        if threading.get_ident() == owner:
            record(module, args, kwargs)

    return hook


@torch.no_grad()
def cross_attention(
    model, src_ids: list[int], tgt_ids: list[int], layer: int = -1, head: int | None = None
) -> torch.Tensor:
    """(T, S) attention of each output token (tgt_ids then <END>) over the source (src_ids then
    <END>), in decoder layer `layer`, averaged over heads unless `head` is given."""
    n_layers = len(model.decoder)
    if not -n_layers <= layer < n_layers:
        raise UserError(
            f"--layer must be in [{-n_layers}, {n_layers - 1}] for this {n_layers}-layer decoder, got {layer}"
        )
    if head is not None and not 0 <= head < model.n_head:
        raise UserError(f"--head must be in [0, {model.n_head - 1}], got {head}")
    device = next(model.parameters()).device
    src = torch.tensor([src_ids + [END]], device=device)
    tgt_in = torch.tensor([[START] + tgt_ids], device=device)
    captured = []
    hook = _this_thread(
        lambda module, args, kwargs: captured.append(_weights(module, args[0], kwargs["memory"], kwargs["mask"]))
    )
    handle = model.decoder[layer].cross.register_forward_hook(hook, with_kwargs=True)
    try:
        memory, mask = model.encode(src)
        model.decode(tgt_in, memory, mask)
    finally:
        handle.remove()
    weights = captured[0][0].float()  # (H, T, S)
    return (weights.mean(dim=0) if head is None else weights[head]).cpu()


@torch.no_grad()
def cross_attention_batch(
    model, sources: list[list[int]], targets: list[list[int]], layers: list[int] | None = None
) -> list[torch.Tensor]:
    """Cross-attention for many (source ids, output ids) pairs, in one padded teacher-forced pass:
    each pair's (T + 1, S + 1) weights, <END> rows and columns included, averaged over every head
    of the decoder layers `layers` (default all: which aligned words best, docs/results.md)."""
    if not sources:
        return []
    device = next(model.parameters()).device
    src = torch.zeros(len(sources), max(map(len, sources)) + 1, dtype=torch.long)
    tgt_in = torch.zeros(len(targets), max(map(len, targets)) + 1, dtype=torch.long)
    for row, (s, t) in enumerate(zip(sources, targets)):
        src[row, : len(s) + 1] = torch.tensor(s + [END])
        tgt_in[row, : len(t) + 1] = torch.tensor([START] + t)
    captured = []
    hook = _this_thread(
        lambda module, args, kwargs: captured.append(
            _weights(module, args[0], kwargs["memory"], kwargs["mask"]).float().mean(dim=1)
        )
    )
    blocks = [model.decoder[i] for i in layers] if layers is not None else list(model.decoder)
    handles = [block.cross.register_forward_hook(hook, with_kwargs=True) for block in blocks]
    try:
        memory, mask = model.encode(src.to(device))
        model.decoder_states(tgt_in.to(device), memory, mask)  # the weights are all it is for: no output layer
    finally:
        for handle in handles:
            handle.remove()
    weights = (sum(captured) / len(captured)).cpu()  # (B, T, S)
    return [weights[row, : len(t) + 1, : len(s) + 1] for row, (s, t) in enumerate(zip(sources, targets))]


def source_links(weights: torch.Tensor, n_src: int, n_tgt: int) -> list[tuple[int, int]]:
    """(source token, output token) links from (T + 1, S + 1) cross-attention, <END>s left out:
    each source token to the output token that attends to it most. Of the readings measured on
    tagged validation sentences (each output token's most attended source token, both, their
    intersection, the step that takes a token as input), this one put tags on the right words most;
    `grown_links` adds an auxiliary's verb to it (bench/markup.py, docs/results.md)."""
    if n_src == 0 or n_tgt == 0:
        return []
    return [(s, int(t)) for s, t in enumerate(weights[:n_tgt, :n_src].argmax(dim=0).tolist())]


def grown_links(weights: torch.Tensor, n_src: int, n_tgt: int) -> list[tuple[int, int]]:
    """`source_links`, grown to the right: an output token whose attention goes clearly (at least
    twice its second choice) to the source token linked to the output token before it joins that
    link. A verb's link lands on its auxiliary ('court' -> 'is'); growing brings the verb ('is
    running'), while a function word that only glances back ('bord' -> 'edge of') stays out."""
    links = source_links(weights, n_src, n_tgt)
    if not links:
        return links
    top = weights[:n_tgt, :n_src].topk(min(2, n_src), dim=1)
    best = top.indices[:, 0].tolist()
    clear = top.values[:, -1] * 2 <= top.values[:, 0] if n_src > 1 else torch.ones(n_tgt, dtype=torch.bool)
    if weights.shape[1] > n_src:  # and more than to the source's <END>, where a token with no source looks
        clear &= top.values[:, 0] > weights[:n_tgt, n_src]
    clear = clear.tolist()
    linked: dict[int, set[int]] = {}
    for s, t in links:
        linked.setdefault(t, set()).add(s)
    for t in range(1, n_tgt):
        if clear[t] and best[t] in linked.get(t - 1, ()):
            linked.setdefault(t, set()).add(best[t])
    return sorted((s, t) for t, sources in linked.items() for s in sources)


def word_alignment(weights: torch.Tensor, src_pieces: list[str], tgt_pieces: list[str]) -> list[tuple[int, int]]:
    """Pharaoh-style (source word, target word) pairs: each target subword is linked to the source
    subword it attends to most, and subwords are mapped to the words they belong to (a piece
    starting with '▁' starts a word). <END> rows and columns are left out."""
    src_word, tgt_word = _word_index(src_pieces), _word_index(tgt_pieces)
    links = set()
    for j in range(len(tgt_pieces)):
        i = int(weights[j, : len(src_pieces)].argmax())
        links.add((src_word[i], tgt_word[j]))
    return sorted(links)


def _word_index(pieces: list[str]) -> list[int]:
    index, word = [], -1
    for p in pieces:
        if p.startswith("▁") or word < 0:
            word += 1
        index.append(word)
    return index


def save_heatmap(
    weights: torch.Tensor, src_pieces: list[str], tgt_pieces: list[str], path: str | Path, title: str = ""
) -> None:
    """A heatmap of (T, S) weights with the subwords on the axes, written as an image to `path`."""
    matplotlib = require_extra("matplotlib", "plot", "pictures")
    matplotlib.use("Agg")  # files, no window
    import matplotlib.pyplot as plt

    cols, rows = src_pieces + ["</s>"], tgt_pieces + ["</s>"]
    fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * len(cols) + 1.5), max(3.0, 0.4 * len(rows) + 1.2)))
    ax.imshow(weights.numpy(), cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=60, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("source subwords")
    ax.set_ylabel("output subwords")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

"""Models: one attention module, residual blocks, GPT, Bigram and the encoder-decoder Transformer.

mt's own recipes train pre-LayerNorm blocks with GELU and vaswani-interleaved sinusoids. The
options that imported Marian (OPUS-MT) models need are options of these same modules, not a
second model: post-LayerNorm blocks, ReLU or swish, Marian's sinusoid layout, a final logits
bias, unscaled embeddings, an untied output matrix.

Shape letters: B batch, S source length, T target (or text) length, H heads, D model width,
K head width (D / H), V vocabulary, L keys held by a cache.

Mask convention (the only one): a boolean tensor broadcastable to (B, H, Tq, Tk), True where a
query may attend to a key. Masks are built once per batch from padding; causality is a flag. fp32
decoding passes SDPA the same mask in its additive float form (0 or -inf), made once per batch.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from mt.config import Config
from mt.cpu.dropout import Dropout, dropout, thread_generator
from mt.data.vocab import PAD
from mt.loss import head_loss


def move_rows_(held: torch.Tensor, dst: torch.Tensor, src: torch.Tensor) -> None:
    """Rows `dst` of `held` take the contents of rows `src`, in place (no row of `src` is in `dst`)."""
    held.index_copy_(0, dst, held.index_select(0, src))


class KVCache:
    """Keys and values for one attention layer, filled as decoding advances.

    Stored (B, L, H, K): each row's filled positions are one contiguous block, so the copies of
    beam search's reordering are one memcpy per row, not one per head. The buffer starts with
    room for `initial` positions and grows by half when full, up to `max_len`: outputs mostly end
    long before their length limit, so a buffer sized for the limit held several times the memory,
    and one that doubled overshot further than growing by half, for no speed (docs/results.md)."""

    def __init__(self, batch: int, n_head: int, max_len: int, head_dim: int, device, dtype, initial: int | None = None):
        room = max_len if initial is None else min(initial, max_len)
        self.k = torch.empty(batch, room, n_head, head_dim, device=device, dtype=dtype)
        self.v = torch.empty_like(self.k)
        self.max_len = max_len
        self.spare: tuple[torch.Tensor, torch.Tensor] | None = None  # reorder's second buffer
        self.len = 0

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add (B, T, H, K) keys and values; returns everything held so far as (B, H, L, K) views."""
        t = k.size(1)
        if self.len + t > self.k.size(1):
            self._grow(self.len + t)
        self.k[:, self.len : self.len + t] = k
        self.v[:, self.len : self.len + t] = v
        self.len += t
        return self.keys_values()

    def _grow(self, length: int) -> None:
        room = min(self.max_len, max(length, math.ceil(CACHE_GROWTH * self.k.size(1))))
        if length > room:
            raise ValueError(f"position {length} is beyond the cache's {self.max_len} positions")
        k = self.k.new_empty(self.k.size(0), room, *self.k.shape[2:])
        v = torch.empty_like(k)
        k[:, : self.len], v[:, : self.len] = self.k[:, : self.len], self.v[:, : self.len]
        self.k, self.v, self.spare = k, v, None  # the spare is made anew at the new size when needed

    def keys_values(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k[:, : self.len].transpose(1, 2), self.v[:, : self.len].transpose(1, 2)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` of the batch (beam search reorders hypotheses and, after its first
        step, makes each sentence's beams; finished sentences leave the batch). Only the filled
        positions are copied, into a second buffer that then swaps with the first: a fresh buffer
        every step cost more in page faults than the copy."""
        rows, n = index.numel(), self.len
        if self.spare is None or self.spare[0].size(0) < rows:  # more rows: beam search's first step
            self.spare = (self.k.new_empty(rows, *self.k.shape[1:]), self.v.new_empty(rows, *self.v.shape[1:]))
        k, v = self.spare[0][:rows], self.spare[1][:rows]
        torch.index_select(self.k[:, :n], 0, index, out=k[:, :n])
        torch.index_select(self.v[:, :n], 0, index, out=v[:, :n])
        self.spare, self.k, self.v = (self.k, self.v), k, v

    def move_rows(self, dst: torch.Tensor, src: torch.Tensor, rows: int | None = None) -> None:
        """Rows `dst` take the keys and values of rows `src`, none of which is in `dst`; every other
        row keeps its own, and with `rows` only the first `rows` are kept. In place, so only the
        rows that change are copied: beam search puts a hypothesis in its parent's row where it
        can, and then three rows in four stay; a finished sentence's rows take the last ones'."""
        for held in (self.k[:, : self.len], self.v[:, : self.len]):
            move_rows_(held, dst, src)
        if rows is not None:
            self.k, self.v = self.k[:rows], self.v[:rows]


# A self-attention cache's first room, and how much larger each new one is: it grows on the rows
# still decoding, so a late, small growth costs less than an early, large one.
CACHE_START = 16
CACHE_GROWTH = 1.5


# Keys up to this many go through _matmul_attention under bf16 on CPU; longer ones through the
# fused kernel, whose memory does not grow with keys x queries.
MATMUL_ATTENTION_MAX_KEYS = 128


def _sdpa(q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False) -> torch.Tensor:
    """Attention (B, H, T, K) -> (B, H, T, K): `F.scaled_dot_product_attention`, except in bf16 on
    CPU, where PyTorch's fused kernel is slow on short sentences (docs/cpu.md): there keys up to
    MATMUL_ATTENTION_MAX_KEYS take two bf16 matmuls around an fp32 softmax. With dropout in a thread
    that has a generator of its own (mt.cpu.dropout.own_generator) it is the matmul form too: SDPA
    draws from the default one."""
    if q.device.type == "cpu" and dropout_p > 0 and thread_generator() is not None:
        return _matmul_attention(q, k, v, attn_mask, dropout_p, is_causal)
    if q.device.type == "cpu" and q.dtype == torch.bfloat16:
        if k.size(-2) <= MATMUL_ATTENTION_MAX_KEYS:
            return _matmul_attention(q, k, v, attn_mask, dropout_p, is_causal)
        with torch.autocast("cpu", enabled=False):  # the fused kernel in fp32 (see above)
            y = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask, dropout_p, is_causal)
        return y.to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal)


def _matmul_attention(q, k, v, mask, dropout_p: float, is_causal: bool) -> torch.Tensor:
    """Attention as two bf16 matmuls around a softmax, which PyTorch computes in fp32 and stores
    in bf16: the numerics of any matmul attention under bf16 autocast (about twice the fused
    kernel's rounding error, both from bf16). `is_causal` is top-left aligned, as in SDPA."""
    scores = (q * q.size(-1) ** -0.5) @ k.transpose(-2, -1)  # (B, H, Tq, Tk)
    if is_causal:
        causal = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
        mask = causal if mask is None else mask & causal
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = dropout(torch.softmax(scores, dim=-1), dropout_p)
    return weights @ v  # (B, H, Tq, K)


class Attention(nn.Module):
    """Multi-head scaled dot-product attention.

    Self-attention when `memory` is None; cross-attention (queries from x, keys and values from
    `memory`) otherwise. One fused (3D, D) projection serves both: self-attention uses it in one
    matmul, cross-attention splits it into its query rows and key/value rows.
    """

    def __init__(self, d_model: int, n_head: int, dropout: float, bias: bool, attention_dropout: float | None = None):
        super().__init__()
        self.n_head, self.d_model = n_head, d_model
        self.dropout = dropout if attention_dropout is None else attention_dropout  # of the attention weights
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.proj = nn.Linear(d_model, d_model, bias=bias)
        self.resid_dropout = Dropout(dropout)
        # cross-attention's query rows and key/value rows as modules of their own (int8 inference)
        self.query: nn.Module | None = None
        self.key_value: nn.Module | None = None

    def projection(self, part: str) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(weight, bias) of one part of the fused projection: "q" (D, D), "kv" (2D, D) or "qkv"
        (3D, D), rows in that order. Attention maps, int8 and the CTranslate2 export ask for them
        here rather than splitting the layout themselves."""
        d = self.d_model
        rows = {"q": (0, d), "kv": (d, 3 * d), "qkv": (0, 3 * d)}[part]
        bias = self.qkv.bias[rows[0] : rows[1]] if self.qkv.bias is not None else None
        return self.qkv.weight[rows[0] : rows[1]], bias

    def _rows(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_head, -1)  # (B, T, D) -> (B, T, H, K)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return self._rows(x).transpose(1, 2)  # (B, T, D) -> (B, H, T, K)

    def forward(self, x, memory=None, mask=None, causal: bool = False, cache: KVCache | None = None):
        b, t, d = x.shape
        if memory is None:
            q, k, v = self.qkv(x).split(d, dim=2)  # 3 x (B, T, D)
            if cache is not None:
                k, v = cache.append(self._rows(k), self._rows(v))  # (B, H, L, K): everything decoded so far
            else:
                k, v = self._heads(k), self._heads(v)
        else:
            q = self.query(x) if self.query is not None else F.linear(x, *self.projection("q"))
            if cache is not None and cache.len:  # memory keys/values were computed at the first step
                k, v = cache.keys_values()
            else:
                kv = self.key_value(memory) if self.key_value is not None else F.linear(memory, *self.projection("kv"))
                k, v = kv.split(d, dim=2)  # 2 x (B, S, D)
                k, v = (
                    cache.append(self._rows(k), self._rows(v))
                    if cache is not None
                    else (self._heads(k), self._heads(v))
                )
        group = b // k.size(0)
        if group > 1:  # beam search: a sentence's beams share its memory, so they become more queries
            q = q.reshape(k.size(0), group * t, d)
        q = self._heads(q)  # (B, H, T, K)
        tq, tk = q.size(2), k.size(2)
        is_causal = causal and tq == tk and mask is None
        if causal and not is_causal and tq > 1:
            # SDPA's is_causal is top-left aligned; with cached keys the queries are the last tq
            # positions, so the mask must be bottom-right aligned.
            causal_mask = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(tk - tq)
            mask = causal_mask if mask is None else mask & causal_mask
        y = _sdpa(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0, is_causal=is_causal
        )  # (B, H, T, K)
        y = y.transpose(1, 2).reshape(b, t, d)  # (B, T, D)
        return self.resid_dropout(self.proj(y))


ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu, "swish": F.silu}


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float, bias: bool, activation: str = "gelu"):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = Dropout(dropout)
        self.activation = activation
        self.act = ACTIVATIONS[activation]

    def forward(self, x):
        return self.dropout(self.down(self.act(self.up(x))))


def _residual(x, sublayer, norm: nn.Module, post_norm: bool, **kwargs):
    """x plus one sublayer, normalised before it (pre-LN, mt's default: stable at high learning
    rates) or after the sum (post-LN, as Vaswani et al. and Marian)."""
    if post_norm:
        return norm(x + sublayer(x, **kwargs))
    return x + sublayer(norm(x), **kwargs)


class Block(nn.Module):
    """Residual block: self-attention then feed-forward, pre- or post-LayerNorm."""

    def __init__(
        self, d_model, n_head, d_ff, dropout, bias, activation="gelu", post_norm=False, attention_dropout=None
    ):
        super().__init__()
        self.post_norm = post_norm
        self.ln_attn = nn.LayerNorm(d_model, bias=bias)
        self.attn = Attention(d_model, n_head, dropout, bias, attention_dropout)
        self.ln_ff = nn.LayerNorm(d_model, bias=bias)
        self.ff = FeedForward(d_model, d_ff, dropout, bias, activation)

    def forward(self, x, mask=None, causal: bool = False, cache: KVCache | None = None):
        x = _residual(x, self.attn, self.ln_attn, self.post_norm, mask=mask, causal=causal, cache=cache)
        return _residual(x, self.ff, self.ln_ff, self.post_norm)


class DecoderBlock(Block):
    """A block with cross-attention to the encoder memory between self-attention and feed-forward."""

    def __init__(
        self, d_model, n_head, d_ff, dropout, bias, activation="gelu", post_norm=False, attention_dropout=None
    ):
        super().__init__(d_model, n_head, d_ff, dropout, bias, activation, post_norm, attention_dropout)
        self.ln_cross = nn.LayerNorm(d_model, bias=bias)
        self.cross = Attention(d_model, n_head, dropout, bias, attention_dropout)

    def forward(self, x, memory, memory_mask, cache: tuple[KVCache, KVCache] | None = None):
        self_cache, cross_cache = cache if cache is not None else (None, None)
        x = _residual(x, self.attn, self.ln_attn, self.post_norm, causal=True, cache=self_cache)
        x = _residual(x, self.cross, self.ln_cross, self.post_norm, memory=memory, mask=memory_mask, cache=cross_cache)
        return _residual(x, self.ff, self.ln_ff, self.post_norm)


def _sinusoids(max_len: int, d_model: int, kind: str) -> torch.Tensor:
    """The (max_len, D) table of `Positions`. Marian's is computed in float64, as its converters
    do: in float32 the angles at position 500 are off by about 1e-4."""
    dtype = torch.float64 if kind == "marian" else torch.float32
    pos = torch.arange(max_len, dtype=dtype).unsqueeze(1)
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=dtype) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model, dtype=dtype)
    half = (d_model + 1) // 2
    sines, cosines = (table[:, :half], table[:, half:]) if kind == "marian" else (table[:, 0::2], table[:, 1::2])
    sines[:], cosines[:] = torch.sin(pos * freq), torch.cos(pos * freq)[:, : cosines.size(1)]
    return table.float()


class Positions(nn.Module):
    """Absolute position embeddings, forward(T, offset) -> (T, D): learned, or sinusoids at
    Vaswani et al.'s frequencies laid out interleaved (sin, cos, sin, ...: "sinusoidal") or in
    halves (every sine, then every cosine: "marian", as Marian and OPUS-MT models have them)."""

    def __init__(self, max_len: int, d_model: int, kind: str):
        super().__init__()
        self.max_len = max_len
        if kind == "learned":
            self.table = nn.Parameter(torch.zeros(max_len, d_model))
        else:
            self.register_buffer("table", _sinusoids(max_len, d_model, kind), persistent=False)

    def forward(self, length: int, offset: int = 0) -> torch.Tensor:
        if offset + length > self.max_len:
            raise ValueError(f"position {offset + length} is beyond the model's {self.max_len} positions")
        return self.table[offset : offset + length]


class Embedding(nn.Module):
    """Token embeddings times `scale`, plus position embeddings."""

    def __init__(self, vocab_size: int, max_len: int, d_model: int, positions: str, dropout: float, scale: float = 1.0):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model)
        self.positions = Positions(max_len, d_model, positions)
        self.scale = scale
        self.dropout = Dropout(dropout)

    def forward(self, idx: torch.Tensor, offset: int = 0) -> torch.Tensor:  # (B, T) -> (B, T, D)
        x = self.tokens(idx)
        if self.scale != 1.0:
            x = x * self.scale
        x = x + self.positions(idx.size(1), offset)
        return self.dropout(x)


def _init_gpt(model: nn.Module, n_layer: int) -> None:
    """GPT-2 initialisation: N(0, 0.02) weights, zero biases, residual projections scaled down."""
    for name, p in model.named_parameters():
        if name.endswith("bias") or ".ln_" in name or name.startswith("ln_"):
            continue  # LayerNorm weights stay 1, biases 0
        if name.endswith(("proj.weight", "down.weight")):
            nn.init.normal_(p, std=0.02 / math.sqrt(2 * n_layer))
        elif p.dim() >= 2:
            nn.init.normal_(p, std=0.02)
    for m in model.modules():
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)


def _init_transformer(model: nn.Module, d_model: int) -> None:
    """Vaswani/fairseq initialisation: Glorot-uniform projections, N(0, D^-0.5) token embeddings
    (scaled by sqrt(D) on input, so about unit size there and unit-size logits through the tied
    output), zero biases. Against GPT-2's N(0, 0.02) this learns several times faster per step for
    the 256-wide CPU model: Adam moves every weight by about the learning rate per step, which
    swamps weights as small as 0.02 (docs/results.md, "Why the recipe initialises as it does")."""
    for name, p in model.named_parameters():
        if name.endswith("bias") or ".ln_" in name or name.startswith("ln_"):
            continue
        if "embed.tokens" in name:
            nn.init.normal_(p, std=d_model**-0.5)
        elif "embed.positions" in name:
            nn.init.normal_(p, std=0.02)
        elif p.dim() >= 2:
            nn.init.xavier_uniform_(p)
    for m in model.modules():
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)


class GPT(nn.Module):
    """Decoder-only language model: causal self-attention blocks, tied input/output embeddings."""

    def __init__(
        self,
        *,
        vocab_size,
        block_size,
        n_layer,
        n_head,
        d_model,
        d_ff,
        dropout,
        bias,
        positions="learned",
        activation="gelu",
        attention_dropout=None,
    ):
        super().__init__()
        self.block_size = block_size
        self.embed = Embedding(
            vocab_size,
            block_size,
            d_model,
            positions,
            dropout,
            scale=math.sqrt(d_model) if positions == "sinusoidal" else 1.0,
        )
        self.blocks = nn.ModuleList(
            Block(d_model, n_head, d_ff, dropout, bias, activation, attention_dropout=attention_dropout)
            for _ in range(n_layer)
        )
        self.ln_out = nn.LayerNorm(d_model, bias=bias)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.embed.tokens.weight
        _init_gpt(self, n_layer)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, T, V)
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x, causal=True)
        return self.head(self.ln_out(x))


class Bigram(nn.Module):
    """The lookup-table baseline: token i reads the next token's logits off row i."""

    def __init__(self, *, vocab_size: int, block_size: int):
        super().__init__()
        self.block_size = block_size
        self.table = nn.Embedding(vocab_size, vocab_size)
        nn.init.normal_(self.table.weight, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, T, V)
        return self.table(idx)


class Transformer(nn.Module):
    """Encoder-decoder Transformer sharing one vocabulary between source and target.

    `encode` runs once per source batch; `decode` runs on the full target (training) or, with a
    cache from `new_cache`, one step at a time (inference). Post-LayerNorm models have no final
    LayerNorm after either stack (ln_enc and ln_dec are then identities).
    """

    def __init__(
        self,
        *,
        vocab_size,
        max_len,
        enc_layers,
        dec_layers,
        n_head,
        d_model,
        d_ff,
        dropout,
        bias,
        positions="learned",
        tie_output=True,
        norm="pre",
        activation="gelu",
        scale_embeddings=True,
        logits_bias=False,
        attention_dropout=None,
    ):
        super().__init__()
        self.max_len, self.n_head = max_len, n_head
        scale = math.sqrt(d_model) if scale_embeddings else 1.0
        self.embed = Embedding(vocab_size, max_len, d_model, positions, dropout, scale=scale)
        layer = dict(
            d_ff=d_ff,
            dropout=dropout,
            attention_dropout=attention_dropout,
            bias=bias,
            activation=activation,
            post_norm=norm == "post",
        )
        # Module order = parameter order, which sets the summation order of the gradient-clipping
        # norm: keep each final LayerNorm right after its stack, as trained runs have them.
        final_norm = (lambda: nn.Identity()) if norm == "post" else (lambda: nn.LayerNorm(d_model, bias=bias))
        self.encoder = nn.ModuleList(Block(d_model, n_head, **layer) for _ in range(enc_layers))
        self.ln_enc = final_norm()
        self.decoder = nn.ModuleList(DecoderBlock(d_model, n_head, **layer) for _ in range(dec_layers))
        self.ln_dec = final_norm()
        self.head = nn.Linear(d_model, vocab_size, bias=logits_bias)
        if tie_output:
            self.head.weight = self.embed.tokens.weight
        _init_transformer(self, d_model)

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S) token ids -> memory (B, S, D) and its key mask (B, 1, 1, S)."""
        src_mask = (src != PAD)[:, None, None, :]
        x = self.embed(src)
        for block in self.encoder:
            x = block(x, mask=src_mask)
        return self.ln_enc(x), src_mask

    def decode(self, tgt, memory, src_mask, cache: list[tuple[KVCache, KVCache]] | None = None):
        """(B, T) target ids -> (B, T, V) logits. With a cache, `tgt` holds only the new tokens.
        `memory` may hold B / N rows: then target rows i*N .. i*N+N-1 (beams) all read memory row i."""
        return self.head(self.decoder_states(tgt, memory, src_mask, cache))

    def decoder_states(self, tgt, memory, src_mask, cache=None) -> torch.Tensor:  # (B, T, D), before the head
        offset = cache[0][0].len if cache else 0
        x = self.embed(tgt, offset)
        for i, block in enumerate(self.decoder):
            x = block(x, memory, src_mask, cache[i] if cache else None)
        return self.ln_dec(x)

    def forward(self, src, tgt, targets: torch.Tensor | None = None, label_smoothing: float = 0.0) -> torch.Tensor:
        """(B, S) source and (B, T) target ids -> (B, T, V) logits; given (B, T) `targets`, the
        mean loss per target token instead, without the logits ever existing whole (mt.loss)."""
        memory, src_mask = self.encode(src)
        if targets is None:
            return self.decode(tgt, memory, src_mask)
        return head_loss(self.decoder_states(tgt, memory, src_mask), self.head, targets, label_smoothing)

    def new_cache(self, memory: torch.Tensor, max_len: int, beams: int = 1) -> list[tuple[KVCache, KVCache]]:
        """Empty self- and cross-attention caches, one pair per decoder layer. With `beams` > 1
        the self-attention caches hold each sentence's beams, the cross-attention caches each
        sentence once (its beams read the same keys)."""
        b, s, d = memory.shape
        k = d // self.n_head
        # Under autocast the keys and values come out of bf16 matmuls while the memory (after a
        # LayerNorm) is fp32: the cache takes the matmuls' dtype, so appending never converts.
        device_type = memory.device.type
        dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else memory.dtype
        make = lambda rows, n, initial=None: KVCache(rows, self.n_head, n, k, memory.device, dtype, initial)  # noqa: E731
        return [(make(b * beams, max_len, CACHE_START), make(b, s)) for _ in self.decoder]


def set_dropout(model: nn.Module, p: float, attention: bool = True) -> None:
    """Every dropout of `model` to `p`: of the embeddings, the sublayers' outputs and, unless
    `attention` is False, the attention weights."""
    for module in model.modules():
        if isinstance(module, Dropout):
            module.p = p
        elif isinstance(module, Attention) and attention:
            module.dropout = p


def build_model(cfg: Config, vocab_size: int) -> nn.Module:
    """The model a recipe describes, sized for its context (LM) or sentence length (translation)."""
    m = cfg.model
    shared = dict(
        vocab_size=vocab_size,
        n_head=m.n_head,
        d_model=m.d_model,
        d_ff=m.d_ff or 4 * m.d_model,
        dropout=m.dropout,
        attention_dropout=m.attention_dropout,
        bias=m.bias,
        positions=m.positions,
        activation=m.activation,
    )
    if m.arch == "bigram":
        return Bigram(vocab_size=vocab_size, block_size=cfg.data.block_size)
    if m.arch == "gpt":
        return GPT(block_size=cfg.data.block_size, n_layer=m.n_layer, **shared)
    return Transformer(
        max_len=positions(cfg),
        enc_layers=m.enc_layers,
        dec_layers=m.dec_layers,
        tie_output=m.tie_output,
        norm=m.norm,
        scale_embeddings=m.scale_embeddings,
        logits_bias=m.logits_bias,
        **shared,
    )


def positions(cfg: Config) -> int:
    """The encoder-decoder's positions: model.max_positions, or by default data.max_len + 1 (the
    source's <END> and the target's <START> / <END> around at most max_len tokens)."""
    return cfg.model.max_positions or cfg.data.max_len + 1

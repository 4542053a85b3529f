"""Properties of the one attention module and of the decoder-only models built on it."""

import math

import torch

import mt.model
from mt.model import GPT, Attention


def reference_attention(q, k, v, mask=None, causal=False):
    """Plain softmax(Q K^T / sqrt(d)) V with the same mask convention (True = may attend)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if causal:
        tq, tk = scores.shape[-2:]
        scores = scores.masked_fill(~torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq), float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1) @ v


def manual_forward(attn: Attention, x, memory=None, mask=None, causal=False):
    d, h = attn.d_model, attn.n_head
    w_q, w_k, w_v = attn.qkv.weight.split(d)
    src = x if memory is None else memory
    heads = lambda t: t.view(t.size(0), t.size(1), h, -1).transpose(1, 2)  # noqa: E731
    q, k, v = heads(x @ w_q.T), heads(src @ w_k.T), heads(src @ w_v.T)
    y = reference_attention(q, k, v, mask, causal).transpose(1, 2).reshape(x.shape)
    return y @ attn.proj.weight.T


def tiny_gpt(**kw):
    args = dict(vocab_size=11, block_size=16, n_layer=2, n_head=2, d_model=16, d_ff=32, dropout=0.0, bias=True)
    return GPT(**(args | kw)).eval()


def test_future_tokens_never_change_past_logits():
    torch.manual_seed(0)
    model = tiny_gpt()
    x = torch.randint(0, 11, (2, 12))
    base = model(x)
    for t in range(12):
        changed = x.clone()
        changed[:, t] = (changed[:, t] + 1) % 11
        out = model(changed)
        assert torch.allclose(out[:, :t], base[:, :t], atol=1e-6), f"position {t} leaked backwards"
        assert not torch.allclose(out[:, t:], base[:, t:], atol=1e-6), "the change must reach later positions"


def test_equal_scores_give_running_mean_of_values():
    """With every score equal (zero queries), causal attention averages the values seen so far."""
    torch.manual_seed(0)
    d = 8
    attn = Attention(d, n_head=2, dropout=0.0, bias=False).eval()
    with torch.no_grad():
        attn.qkv.weight.copy_(torch.cat([torch.zeros(d, d), torch.randn(d, d), torch.eye(d)]))
        attn.proj.weight.copy_(torch.eye(d))
    x = torch.randn(3, 10, d)
    y = attn(x, causal=True)
    running_mean = x.cumsum(dim=1) / torch.arange(1, 11).view(1, 10, 1)
    assert torch.allclose(y, running_mean, atol=1e-6)


def test_padded_key_never_changes_outputs():
    torch.manual_seed(0)
    attn = Attention(16, n_head=4, dropout=0.0, bias=True).eval()
    x = torch.randn(2, 5, 16)
    memory = torch.randn(2, 7, 16)
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    mask[:, :, :, 4:] = False  # the last three keys are padding
    base = attn(x, memory=memory, mask=mask)
    scrambled = memory.clone()
    scrambled[:, 4:] = torch.randn(2, 3, 16) * 100
    assert torch.allclose(attn(x, memory=scrambled, mask=mask), base, atol=1e-6)
    # and self-attention over a padded sequence: real queries ignore padded keys
    pad_mask = mask[:, :, :, :5].clone()
    pad_mask[:, :, :, 3:] = False
    y = attn(x, mask=pad_mask)
    x2 = x.clone()
    x2[:, 3:] = torch.randn(2, 2, 16)
    assert torch.allclose(attn(x2, mask=pad_mask)[:, :3], y[:, :3], atol=1e-6)


def test_sdpa_matches_plain_reference():
    torch.manual_seed(0)
    attn = Attention(16, n_head=4, dropout=0.0, bias=False).eval()
    x, memory = torch.randn(2, 6, 16), torch.randn(2, 9, 16)
    mask = torch.rand(2, 1, 6, 9) > 0.3
    mask[..., 0] = True  # no fully masked row
    key_mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    key_mask[1, ..., 4:] = False
    cases = [
        (attn(x, causal=True), manual_forward(attn, x, causal=True)),
        (attn(x, mask=key_mask), manual_forward(attn, x, mask=key_mask)),
        (attn(x, memory=memory, mask=mask), manual_forward(attn, x, memory=memory, mask=mask)),
        (attn(x, mask=key_mask, causal=True), manual_forward(attn, x, mask=key_mask, causal=True)),
    ]
    for got, want in cases:
        assert torch.allclose(got, want, atol=1e-5)


def _attention_and_grads(q, k, v, dtype, **kwargs):
    """mt.model._sdpa's output and input gradients for (B, H, T, K) inputs cast to `dtype`."""
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    y = mt.model._sdpa(q, k, v, **kwargs)
    y.float().pow(2).sum().backward()
    return [t.float() for t in (y, q.grad, k.grad, v.grad)]


def test_bf16_cpu_attention_stays_near_a_float64_reference():
    """Under bf16 on CPU, short keys go through plain matmuls, long ones through the fused kernel
    in fp32: both must give what SDPA gives in float64, outputs and gradients, within bf16's
    rounding, for causal, padded-key and cross-attention (more queries than keys) shapes."""
    torch.manual_seed(0)
    for keys in (24, mt.model.MATMUL_ATTENTION_MAX_KEYS + 8):
        mask = torch.ones(3, 1, 1, keys, dtype=torch.bool)
        mask[1, ..., keys // 2 :] = False
        for queries, kwargs in [(keys, {"is_causal": True}), (keys, {"attn_mask": mask}), (7, {"attn_mask": mask})]:
            q, k, v = torch.randn(3, 4, queries, 32), torch.randn(3, 4, keys, 32), torch.randn(3, 4, keys, 32)
            want = _attention_and_grads(q, k, v, torch.float64, **kwargs)
            got = _attention_and_grads(q, k, v, torch.bfloat16, **kwargs)
            for a, b in zip(got, want):
                assert torch.isfinite(a).all()
                error = ((a - b).abs().max() / b.abs().max()).item()
                assert error < 0.03, (keys, queries, list(kwargs), error)


def test_bf16_cpu_attention_ignores_padded_keys_and_drops_only_when_asked():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 10, 16, dtype=torch.bfloat16) for _ in range(3))
    mask = torch.ones(2, 1, 1, 10, dtype=torch.bool)
    mask[:, ..., 6:] = False
    base = mt.model._sdpa(q, k, v, attn_mask=mask)
    k2, v2 = k.clone(), v.clone()
    k2[..., 6:, :], v2[..., 6:, :] = 100.0, -100.0
    assert torch.equal(mt.model._sdpa(q, k2, v2, attn_mask=mask), base)
    assert torch.equal(mt.model._sdpa(q, k, v, attn_mask=mask, dropout_p=0.0), base)
    dropped = mt.model._sdpa(q, k, v, attn_mask=mask, dropout_p=0.5)
    assert not torch.equal(dropped, base) and torch.isfinite(dropped).all()


def test_attention_dropout_only_in_training():
    torch.manual_seed(0)
    attn = Attention(16, n_head=4, dropout=0.5, bias=False)
    x = torch.randn(2, 6, 16)
    attn.train()
    assert not torch.allclose(attn(x, causal=True), attn(x, causal=True))
    attn.eval()
    assert torch.allclose(attn(x, causal=True), attn(x, causal=True))


def test_gpt_ties_embeddings_and_crops_nothing_silently():
    model = tiny_gpt()
    assert model.head.weight is model.embed.tokens.weight
    try:
        model(torch.zeros(1, 17, dtype=torch.long))
    except ValueError as e:
        assert "positions" in str(e)
    else:
        raise AssertionError("a sequence longer than block_size must be refused")

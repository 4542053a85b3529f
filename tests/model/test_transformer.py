"""Encoder-decoder properties, cached decoding, decoding equivalences, and a learned synthetic task."""

import math

import pytest
import torch

from mt.data.batching import collate
from mt.data.vocab import END, START
from mt.inference import search as decode
from mt.inference.search import beam_search, greedy_or_sample
from mt.inference.selection import argmax_rows, topk_rows
from mt.loss import token_loss
from mt.model import KVCache, Transformer

pytestmark = pytest.mark.numerics  # CI runs these again with AVX2 kernels, fp32 and two threads

V = 20


def best(found):
    """beam_search's n-best outputs and (B, N) scores -> the best output and (B,) score of each."""
    ids, scores, _ = found
    return [n[0] for n in ids], scores[:, 0]


def tiny(max_len=24, **kw):
    torch.manual_seed(0)
    args = dict(
        vocab_size=V, max_len=max_len, enc_layers=2, dec_layers=2, n_head=2, d_model=32, d_ff=64, dropout=0.0, bias=True
    )
    return Transformer(**(args | kw)).eval()


def ids(*rows):
    return torch.tensor(rows, dtype=torch.long)


def test_encoder_is_bidirectional():
    model = tiny()
    src = ids([5, 6, 7, 8, END])
    changed = ids([5, 6, 7, 9, END])
    a, _ = model.encode(src)
    b, _ = model.encode(changed)
    assert not torch.allclose(a[:, 0], b[:, 0], atol=1e-6)


def test_decoder_is_causal_and_reads_the_source():
    model = tiny()
    src, tgt = ids([5, 6, 7, END]), ids([START, 8, 9, 10, 11])
    base = model(src, tgt)
    changed = tgt.clone()
    changed[0, 3] = 12
    out = model(src, changed)
    assert torch.allclose(out[:, :3], base[:, :3], atol=1e-6)
    assert not torch.allclose(out[:, 3:], base[:, 3:], atol=1e-6)
    other_source = model(ids([9, 9, 6, END]), tgt)
    assert not torch.allclose(other_source, base, atol=1e-4)


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_padding_never_changes_logits(positions):
    model = tiny(positions=positions)
    alone = collate([[5, 6, 7]], [[8, 9]])
    batch = collate([[5, 6, 7], [4, 5, 6, 7, 8, 9, 10, 11]], [[8, 9], [8, 9, 10, 11, 12, 13]])
    assert batch["src"].size(1) > alone["src"].size(1) and batch["tgt_in"].size(1) > alone["tgt_in"].size(1)
    a = model(alone["src"], alone["tgt_in"])
    b = model(batch["src"], batch["tgt_in"])[:1, : a.size(1)]
    assert torch.allclose(a, b, atol=1e-5)


def test_a_cache_grows_by_half_its_room_keeps_every_position_and_stops_at_its_limit():
    cache = KVCache(batch=2, n_head=2, max_len=30, head_dim=3, device="cpu", dtype=torch.float32, initial=8)
    keys = torch.randn(2, 30, 2, 3)
    rooms = []
    for t in range(30):
        k, v = cache.append(keys[:, t : t + 1], -keys[:, t : t + 1])
        rooms.append(cache.k.size(1))
    assert sorted(set(rooms)) == [8, 12, 18, 27, 30]  # half as much again each time, then the limit
    assert torch.equal(k, keys.transpose(1, 2)) and torch.equal(v, -keys.transpose(1, 2))
    with pytest.raises(ValueError, match="beyond the cache's 30 positions"):
        cache.append(keys[:, :1], keys[:, :1])


def test_cached_incremental_decoding_equals_full_forward():
    model = tiny()
    src = collate([[5, 6, 7], [4, 5, 6, 7, 8]], [[1]])["src"]
    tgt = ids([START, 8, 9, 10, 11, 12], [START, 13, 14, 15, 16, 17])
    full = model(src, tgt)
    memory, src_mask = model.encode(src)
    cache = model.new_cache(memory, tgt.size(1))
    steps = [model.decode(tgt[:, t : t + 1], memory, src_mask, cache) for t in range(tgt.size(1))]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    # a multi-token chunk after cached steps needs the bottom-right causal mask
    cache = model.new_cache(memory, tgt.size(1))
    first = model.decode(tgt[:, :2], memory, src_mask, cache)
    rest = model.decode(tgt[:, 2:], memory, src_mask, cache)
    assert torch.allclose(torch.cat([first, rest], dim=1), full, atol=1e-5)


def test_beams_sharing_one_memory_row_equal_a_memory_repeated_per_beam():
    """Beam search keeps each sentence's memory once and folds its beams into extra queries."""
    model = tiny()
    src = collate([[5, 6, 7], [4, 5, 6, 7, 8]], [[1]])["src"]
    tgt = ids(*[[START, 8 + j, 9, 10 + j] for j in range(6)])  # 2 sentences x 3 beams, each its own
    memory, src_mask = model.encode(src)
    repeated = model.decode(tgt, memory.repeat_interleave(3, 0), src_mask.repeat_interleave(3, 0))
    assert torch.allclose(model.decode(tgt, memory, src_mask), repeated, atol=1e-5)
    cache = model.new_cache(memory, tgt.size(1), beams=3)
    steps = [model.decode(tgt[:, t : t + 1], memory, src_mask, cache) for t in range(tgt.size(1))]
    assert torch.allclose(torch.cat(steps, dim=1), repeated, atol=1e-5)
    assert cache[0][0].k.size(0) == 6 and cache[0][1].k.size(0) == 2


def sources():
    return collate([[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16]], [[1]])["src"]


def random_sources(seed: int, count: int):
    """`count` random sources of 1 to 11 tokens, padded into one batch."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 12, (count,), generator=g)
    return collate([torch.randint(4, V, (int(n),), generator=g).tolist() for n in lengths], [[1]])["src"]


def test_beam_one_equals_greedy_and_top_k_one_equals_greedy():
    model = tiny()
    greedy, _, _ = greedy_or_sample(model, sources())
    beam1 = best(beam_search(model, sources(), beam=1, length_penalty=1.0))[0]
    g = torch.Generator().manual_seed(0)
    top1, _, _ = greedy_or_sample(model, sources(), temperature=1.0, top_k=1, generator=g)
    assert greedy == beam1 == top1
    assert all(len(x) > 0 for x in greedy)


@pytest.mark.parametrize("vocab", [20, 8000, 7919, 59515])  # too few for blocks, whole blocks, tails of 47 and 123
def test_blockwise_argmax_is_argmax_even_among_ties(vocab):
    torch.manual_seed(0)
    ties = torch.randint(0, 3, (7, vocab)).float()
    ties[0, -1] = ties[1, 0] = 5.0  # a row's only maximum in the tail, another's at the start
    tail_nan = torch.randn(7, vocab)
    tail_nan[:, -1] = float("nan")  # argmax takes NaN as the largest
    body_nan = tail_nan.clone()
    body_nan[:, 1] = float("nan")
    nothing = torch.full((7, vocab), float("-inf"))
    for scores in [torch.randn(7, vocab), ties, tail_nan, body_nan, nothing]:
        assert torch.equal(argmax_rows(scores), scores.argmax(dim=-1))


@pytest.mark.parametrize("vocab", [8000, 8003, 300, 30])  # whole blocks, a tail of 3, few blocks, too few for blocks
def test_blockwise_topk_gives_topks_values_at_distinct_indices_even_among_ties(vocab):
    torch.manual_seed(0)
    rows = [torch.randn(9, vocab), torch.randint(0, 4, (9, vocab)).float(), torch.full((9, vocab), float("-inf"))]
    rows[0][:, -1] = 50.0  # the largest entry in the tail
    for scores in rows:  # random, many equal values, nothing finite
        values, index = topk_rows(scores, 10)
        assert torch.equal(values, scores.topk(10, dim=-1).values)
        assert torch.equal(scores.gather(1, index), values)
        assert all(len(set(r)) == 10 for r in index.tolist())
    assert torch.equal(topk_rows(rows[0], 10)[1], rows[0].topk(10, dim=-1).indices)  # distinct values: the same indices


def test_beam_search_finds_a_score_at_least_greedys():
    for seed in range(3):
        model = tiny()
        torch.manual_seed(seed)
        for p in model.parameters():  # sharper, more varied distributions than the initialisation
            p.data.normal_(0, 0.3)
        _, greedy_score, _ = greedy_or_sample(model, sources())
        _, beam_score = best(beam_search(model, sources(), beam=5, length_penalty=0.0))
        assert (beam_score >= greedy_score - 1e-4).all(), (beam_score, greedy_score)


def test_each_token_log_probability_is_what_forced_decoding_gives_it():
    """The searches' per-token log-probabilities (greedy, beam with n-best lists, an ensemble) are
    the numbers forced decoding gives each output's tokens, <END>'s last (0 where the length limit
    forced it, as the searches score it), and add up to the output's log-probability."""
    from mt.inference.search import target_token_logprobs

    model, other = tiny(), tiny()
    for p in list(model.parameters()) + list(other.parameters()):
        p.data.normal_(0, 0.3)
    src = random_sources(seed=4, count=9)
    ids, scores, logprobs = greedy_or_sample(model, src)
    for got, want in zip(logprobs, target_token_logprobs(model, src, ids)):
        assert same_but_a_forced_end(got, want)
    assert [len(x) + 1 for x in ids] == [len(x) for x in logprobs]
    assert torch.allclose(torch.tensor([sum(x) for x in logprobs]), scores, atol=1e-4)
    for models in (model, [model, other]):
        found, _, found_logprobs = beam_search(models, src, beam=3, n_best=2, length_penalty=0.0)
        for rank in range(2):
            outputs = [n[rank] for n in found]
            forced = target_token_logprobs(models, src, outputs)
            for got, want, out in zip([n[rank] for n in found_logprobs], forced, outputs):
                assert len(got) == len(out) + 1 and same_but_a_forced_end(got, want)


def same_but_a_forced_end(got: list[float], want: list[float]) -> bool:
    return got[:-1] == pytest.approx(want[:-1], abs=1e-4) and got[-1] in (0.0, pytest.approx(want[-1], abs=1e-4))


def test_outputs_respect_the_length_bound():
    model = tiny(max_len=12)
    out, _, _ = greedy_or_sample(model, sources())
    beamed, _ = best(beam_search(model, sources(), beam=3))
    assert all(len(x) < 12 for x in out + beamed)


@pytest.mark.slow
def test_small_model_learns_to_reverse_sequences():
    """Reverse sequences of 3-8 symbols: >= 95% exact match after a short CPU training run. Warm-up
    and a cosine to zero let the run settle well above the threshold whatever the kernels and the
    threads; a constant rate left it at the threshold's edge, where rounding decided."""
    torch.manual_seed(0)
    model = Transformer(
        vocab_size=14, max_len=12, enc_layers=2, dec_layers=2, n_head=4, d_model=64, d_ff=128, dropout=0.0, bias=True
    )
    steps = 600
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    warm_then_cosine = lambda i: min(1.0, (i + 1) / 40) * 0.5 * (1 + math.cos(math.pi * min(i, steps) / steps))  # noqa: E731
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, warm_then_cosine)

    def sample(n):
        lengths = torch.randint(3, 9, (n,))
        rows = [torch.randint(4, 14, (int(k),)).tolist() for k in lengths]
        return rows, [r[::-1] for r in rows]

    model.train()
    for _ in range(steps):
        src, tgt = sample(64)
        batch = collate(src, tgt)
        loss = token_loss(model(batch["src"], batch["tgt_in"]), batch["tgt_out"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
    model.eval()
    src, tgt = sample(200)
    out, _, _ = greedy_or_sample(model, collate(src, tgt)["src"])
    accuracy = sum(o == t for o, t in zip(out, tgt)) / len(tgt)
    assert accuracy >= 0.95, accuracy


@pytest.mark.parametrize("limit", [None, 70])  # 70 outputs positions: the caches grow from 32 to 64, then to 71
def test_decoding_without_the_cache_gives_the_same_outputs(limit):
    model = tiny(max_len=80)
    for p in model.parameters():
        p.data.normal_(0, 0.3)
    if limit:  # <END> never wins: every output runs to the limit
        model.head.weight.data[END] -= 100.0
    plain, _, _ = greedy_or_sample(model, sources(), max_len=limit)
    assert plain == greedy_or_sample(model, sources(), use_cache=False, max_len=limit)[0]
    assert limit is None or all(len(x) == limit for x in plain)
    cached, s1 = best(beam_search(model, sources(), beam=3, max_len=limit))
    uncached, s2 = best(beam_search(model, sources(), beam=3, use_cache=False, max_len=limit))
    assert cached == uncached and torch.allclose(s1, s2, atol=1e-4)


def test_checking_for_the_end_less_often_changes_no_output(monkeypatch):
    """On a GPU decoding reads 'all finished?' every 8 steps; the steps it then runs past the
    end must change neither outputs nor scores."""
    model = tiny()
    for p in model.parameters():
        p.data.normal_(0, 0.3)
    every_step = greedy_or_sample(model, sources()), best(beam_search(model, sources(), beam=3))
    monkeypatch.setattr(decode, "_finished_every", lambda device: 8)
    sparse = greedy_or_sample(model, sources()), best(beam_search(model, sources(), beam=3))
    for (out_a, score_a, *_), (out_b, score_b, *_) in zip(every_step, sparse):
        assert out_a == out_b and torch.allclose(score_a, score_b)


def test_dropping_finished_sentences_changes_no_output(monkeypatch):
    """Finished sentences leave the batch (and their rows the caches); outputs and scores must be
    those of decoding every sentence to the end."""
    model = tiny()
    for p in model.parameters():
        p.data.normal_(0, 0.3)
    src = random_sources(seed=1, count=16)
    monkeypatch.setattr(decode, "_worth_shrinking", lambda finished, rows: finished > 0)  # drop at every chance
    shrinking_moves = []
    real_move = KVCache.move_rows
    monkeypatch.setattr(
        KVCache,
        "move_rows",
        lambda self, *args: shrinking_moves.append(args[2] < self.k.size(0)) or real_move(self, *args),
    )
    shrunk = greedy_or_sample(model, src), beam_search(model, src, beam=3, n_best=2)
    assert any(shrinking_moves)  # finished rows were dropped in place, by moving the last rows into them
    monkeypatch.setattr(decode, "_worth_shrinking", lambda finished, rows: False)
    full = greedy_or_sample(model, src), beam_search(model, src, beam=3, n_best=2)
    assert len({len(x) for x in full[0][0]}) > 3  # outputs of many lengths: rows really left early
    for (out_a, score_a, _), (out_b, score_b, _) in zip(shrunk, full):
        assert out_a == out_b and torch.allclose(score_a, score_b, atol=1e-5)


def test_n_best_lists_are_sorted_and_start_with_the_one_best():
    model = tiny()
    for p in model.parameters():
        p.data.normal_(0, 0.3)
    one, one_score, _ = beam_search(model, sources(), beam=4)
    many, scores, _ = beam_search(model, sources(), beam=4, n_best=3)
    assert [n[0] for n in many] == [n[0] for n in one] and torch.allclose(scores[:, 0], one_score[:, 0])
    assert (scores[:, :-1] >= scores[:, 1:]).all() and all(len(n) == 3 for n in many)


def test_int8_model_calls_the_quantized_operator_directly_with_the_same_results():
    """Every layer but the output layer is PyTorch's dynamically quantized module, called without its
    Python checks: the same numbers. On CPUs with int8 dot products the output layer keeps the same
    int8 weights on oneDNN, which quantizes activations to 8 bits instead of fbgemm's 7: close to the
    module's logits, not equal; elsewhere it stays on fbgemm: equal."""
    import copy
    import warnings

    from mt.hardware import cpu_has_int8_dot_products
    from mt.inference.quantize import Int8Linear, _split_cross_projections, quantize_int8

    model = tiny()
    reference = copy.deepcopy(model)
    _split_cross_projections(reference)
    names = {n for n, m in reference.named_modules() if isinstance(m, torch.nn.Linear) and not n.endswith("cross.qkv")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = torch.ao.quantization.quantize_dynamic(reference, names, dtype=torch.qint8)
    thin = quantize_int8(model)
    assert sum(isinstance(m, Int8Linear) for m in thin.modules()) == len(names)
    assert not any(isinstance(m, torch.ao.nn.quantized.dynamic.Linear) for m in thin.modules())
    on_onednn = "onednn" in torch.backends.quantized.supported_engines and cpu_has_int8_dot_products()
    assert thin.head.reduce_range is not on_onednn
    src, tgt = sources(), ids([START, 5, 6], [START, 7, 8], [START, 9, 10])
    with torch.no_grad():
        states = [m.decoder_states(tgt, *m.encode(src)) for m in (thin, reference)]
        assert torch.equal(states[0], states[1])
        logits, expected = thin.head(states[0]), reference.head(states[1])
        if on_onednn:
            assert (logits - expected).abs().max() < 0.05 * expected.abs().max()
        else:
            assert torch.equal(logits, expected)
        assert torch.equal(thin(src, tgt), logits)


@pytest.mark.parametrize("flags, isa", [({"avx2", "fma"}, None), ({"avx512_vnni", "amx_int8"}, "AVX2")])
def test_int8_output_layer_stays_on_fbgemm_without_int8_dot_products(monkeypatch, flags, isa):
    """On an AVX2-only CPU, or one whose oneDNN is kept at AVX2 (ONEDNN_MAX_CPU_ISA), oneDNN sums
    8-bit products in 16 bits, which saturate (logits 10% off): every layer, the output layer
    included, keeps fbgemm's 7-bit activations."""
    from mt import hardware
    from mt.inference import quantize

    monkeypatch.setattr(hardware, "cpu_flags", lambda: flags)
    if isa:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", isa)
    model = quantize.quantize_int8(tiny())
    layers = [m for m in model.modules() if isinstance(m, quantize.Int8Linear)]
    assert layers and all(m.reduce_range is True and m.large_packed is None for m in layers)


@pytest.mark.skipif("onednn" not in torch.backends.quantized.supported_engines, reason="no oneDNN int8 engine here")
@pytest.mark.parametrize("amx", [True, False])
def test_int8_layers_send_large_calls_to_onednn_only_on_cpus_with_amx(monkeypatch, amx):
    """With AMX int8 tiles each layer but the output layer keeps fbgemm for calls below
    AMX_ONEDNN_FROM_MACS multiply-adds and hands larger ones to oneDNN's packing of the same weights;
    without them every such call stays on fbgemm. The output layer is on oneDNN either way."""
    from mt import hardware
    from mt.inference import quantize

    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx512_vnni"} | ({"amx_int8"} if amx else set()))
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    model = quantize.quantize_int8(tiny())
    layers = [m for n, m in model.named_modules() if isinstance(m, quantize.Int8Linear) and n != "head"]
    assert model.head.large_packed is None and model.head.reduce_range is False
    if not amx:
        assert all(m.large_packed is None for m in layers)
        return
    for layer in layers:
        weight = torch.ops.quantized.linear_unpack(layer.packed)[0]
        outputs, inputs = weight.shape
        assert (layer.large_from - 1) * outputs < quantize.AMX_ONEDNN_FROM_MACS <= layer.large_from * outputs
        rows = -(-layer.large_from // inputs)  # the fewest rows that reach it
        for n, packed, reduce_range in [(rows - 1, layer.packed, True), (rows, layer.large_packed, False)]:
            x = torch.randn(n, inputs)
            assert torch.equal(layer(x), torch.ops.quantized.linear_dynamic(x, packed, reduce_range))
    x = torch.randn(rows, inputs) * 3
    assert not torch.equal(  # the two packings really are different kernels
        torch.ops.quantized.linear_dynamic(x, layer.packed, True),
        torch.ops.quantized.linear_dynamic(x, layer.large_packed, False),
    )


def test_decoding_masks_in_fp32_are_additive_and_change_no_output(monkeypatch):
    """Decoding hands SDPA the float mask it would make of the boolean one at every call: outputs
    and scores are those of the boolean mask, bit for bit."""
    model = tiny()
    for p in model.parameters():
        p.data.normal_(0, 0.3)
    src = collate([[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15]], [[1]])["src"]  # padded keys: the mask matters
    state = decode.Decoder(model, src, 8)
    assert state.masks[0].dtype == torch.float32 and state.masks[0].isinf().sum() == (src == 0).sum()
    additive = greedy_or_sample(model, src), beam_search(model, src, beam=3, n_best=2)
    monkeypatch.setattr(decode, "_additive", lambda mask: mask)
    boolean = greedy_or_sample(model, src), beam_search(model, src, beam=3, n_best=2)
    for (out_a, score_a, _), (out_b, score_b, _) in zip(additive, boolean):
        assert out_a == out_b and torch.equal(score_a, score_b)


def test_new_beams_take_their_parents_rows_so_that_fewest_rows_move():
    rows = ids([0, 0, 1, 4, 0], [5, 7, 7, 7, 9])  # two sentences of 5 beams: the rows each new beam extends
    order = decode._in_parent_rows(rows)
    assert sorted(order[0].tolist()) == sorted(order[1].tolist()) == list(range(5))  # a permutation
    flat = rows.gather(1, order).view(-1)
    stay = flat == torch.arange(10)
    assert stay.sum() == 6  # one row per distinct parent: 0, 1, 4 and 5, 7, 9
    assert decode._moves(flat) is not None  # no moved row is read after it is written


def test_finished_sentences_give_their_places_to_the_last_survivors():
    done = torch.tensor([False, True, False, True, False, False, True, False])
    order = decode._survivors(done)
    assert sorted(order.tolist()) == (~done).nonzero().squeeze(1).tolist()  # every survivor, once
    assert order.tolist() == [0, 5, 2, 7, 4]  # survivors among the first five stay; holes take 5 and 7
    dst, src = decode._moves(order)
    assert dst.tolist() == [1, 3] and src.tolist() == [5, 7]  # two rows copied, not five


def test_beams_in_their_parents_rows_change_no_output(monkeypatch):
    """Ordering each sentence's beams by parent (so that the caches move only the rows that change,
    in place) gives the outputs and scores of the best-first order with whole-cache reorders."""
    model = tiny()
    for p in model.parameters():
        p.data.normal_(0, 0.3)
    src = random_sources(seed=2, count=12)
    moved = []
    real_move = KVCache.move_rows
    monkeypatch.setattr(KVCache, "move_rows", lambda self, *args: moved.append(1) or real_move(self, *args))
    in_place = beam_search(model, src, beam=4, n_best=2)
    assert moved  # the in-place path ran
    monkeypatch.setattr(decode, "_in_parent_rows", lambda rows: torch.arange(rows.size(1)).expand_as(rows))
    monkeypatch.setattr(decode, "_moves", lambda rows: None)
    best_first = beam_search(model, src, beam=4, n_best=2)
    assert in_place[0] == best_first[0] and torch.equal(in_place[1], best_first[1])


def test_next_token_scores_in_slices_of_rows_change_no_output(monkeypatch):
    """On a CPU a step's (rows, V) scores are computed a slice of rows at a time once they would
    take more than SCORES_SLICE_BYTES: greedy, beam search with n-best lists and an ensemble give
    the outputs of one slice, and its scores up to the last bits (a matmul over fewer rows may sum
    in another order), and the slices cover every row once."""
    model, other = tiny(), tiny()
    for p in list(model.parameters()) + list(other.parameters()):
        p.data.normal_(0, 0.3)
    src = random_sources(seed=3, count=16)

    def decoded():
        return (
            greedy_or_sample(model, src),
            beam_search(model, src, beam=3, n_best=2),
            beam_search([model, other], src, beam=3),
        )

    whole = decoded()
    slices = []
    real_slices = decode._row_slices
    monkeypatch.setattr(decode, "SCORES_SLICE_BYTES", 5 * V * 4)  # about five rows a slice
    monkeypatch.setattr(decode, "_row_slices", lambda *a: slices.append(real_slices(*a)) or slices[-1])
    sliced = decoded()
    assert max(len(s) for s in slices) >= 9  # 16 sentences x 3 beams in slices of 5 or 6 rows
    for cut in slices:
        assert [i for s in cut for i in range(s.start, s.stop)] == list(range(cut[-1].stop))
    for (out_a, score_a, _), (out_b, score_b, _) in zip(whole, sliced):
        assert out_a == out_b and torch.allclose(score_a, score_b, rtol=0, atol=1e-5)


def test_the_attention_weights_have_a_dropout_rate_of_their_own():
    from mt.config import load_config
    from mt.model import Attention, build_model

    def rates(model):
        found = [m for m in model.modules() if isinstance(m, Attention)]
        return {(a.dropout, a.resid_dropout.p) for a in found}, len(found)

    assert rates(tiny(dropout=0.3)) == ({(0.3, 0.3)}, 6)  # unset: the weights take model.dropout
    assert rates(tiny(dropout=0.3, attention_dropout=0.0)) == ({(0.0, 0.3)}, 6)
    cfg = load_config("recipes/multi30k.yaml", ["model.dropout=0.2", "model.attention_dropout=0.05"])
    assert rates(build_model(cfg, V))[0] == {(0.05, 0.2)}
    # Only the attention weights dropped: training-mode outputs vary, eval-mode ones do not.
    model, src, tgt = tiny(attention_dropout=0.5), ids([5, 6, 7, 8, END]), ids([START, 9, 10])
    assert torch.equal(model(src, tgt), model(src, tgt))
    model.train()
    assert not torch.equal(model(src, tgt), model(src, tgt))

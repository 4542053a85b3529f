"""The training loss: equal to PyTorch's cross-entropy in value and gradient, padding ignored."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import mt.loss
from mt.data.vocab import PAD
from mt.loss import head_loss, token_loss
from mt.model import Transformer


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_token_loss_matches_cross_entropy(smoothing):
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11, dtype=torch.float64).float().requires_grad_()
    targets = torch.randint(1, 11, (3, 5))
    targets[0, 3:] = PAD  # padding contributes neither loss nor gradient
    ours = token_loss(logits, targets, smoothing)
    (grad_ours,) = torch.autograd.grad(ours * 2.5, logits)
    reference = F.cross_entropy(
        logits.reshape(-1, 11), targets.reshape(-1), ignore_index=PAD, label_smoothing=smoothing
    )
    (grad_ref,) = torch.autograd.grad(reference * 2.5, logits)
    assert torch.allclose(ours, reference, atol=1e-6)
    assert torch.allclose(grad_ours, grad_ref, atol=1e-6)
    assert grad_ours[0, 3:].abs().max() == 0


def test_token_loss_in_bf16_returns_a_bf16_gradient():
    logits = torch.randn(4, 7, dtype=torch.bfloat16, requires_grad=True)
    loss = token_loss(logits, torch.tensor([1, 2, 3, PAD]), 0.1)
    loss.backward()
    assert loss.dtype == torch.float32 and logits.grad.dtype == torch.bfloat16


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("chunk_rows,row_multiple", [(128, 64), (3, 4), (3, 1), (4, 1)])
def test_head_loss_equals_the_output_layer_then_token_loss(bias, smoothing, chunk_rows, row_multiple, monkeypatch):
    """Slices of 4 rows over 3 x 5 targets: one slice is short, and padding falls across slices;
    with chunks of 3 rows the elementwise passes also split each slice (with 4, each slice is one
    pass, as on a GPU); with a row multiple of 4 or 1 the 11 real rows go in with one padding row or
    none (64: all 15 rows go in)."""
    monkeypatch.setattr(mt.loss, "CHUNK_ROWS", chunk_rows)
    monkeypatch.setattr(mt.loss, "ROW_MULTIPLE", row_multiple)
    torch.manual_seed(0)
    states = torch.randn(3, 5, 8, requires_grad=True)
    head = torch.nn.Linear(8, 11, bias=bias)
    targets = torch.randint(1, 11, (3, 5))
    targets[0, 3:] = PAD
    targets[2, 1] = PAD
    params = [states, head.weight] + ([head.bias] if bias else [])
    ours = head_loss(states, head, targets, smoothing, rows=4)
    grads_ours = torch.autograd.grad(ours * 2.5, params)
    reference = token_loss(head(states), targets, smoothing)
    grads_ref = torch.autograd.grad(reference * 2.5, params)
    assert torch.allclose(ours, reference, atol=1e-6)
    for g, r in zip(grads_ours, grads_ref):
        assert torch.allclose(g, r, atol=1e-6)
    assert grads_ours[0][0, 3:].abs().max() == 0
    with torch.no_grad():
        assert torch.allclose(head_loss(states, head, targets, smoothing, rows=4), reference, atol=1e-6)


def test_transformer_given_targets_returns_the_loss_of_its_logits():
    torch.manual_seed(0)
    model = Transformer(
        vocab_size=13, max_len=16, enc_layers=1, dec_layers=1, n_head=2, d_model=8, d_ff=16, dropout=0.0, bias=True
    )
    src, tgt = torch.randint(4, 13, (2, 6)), torch.randint(4, 13, (2, 5))
    targets = torch.randint(4, 13, (2, 5))
    targets[1, 3:] = PAD
    fused = model(src, tgt, targets=targets, label_smoothing=0.1)
    (g_fused,) = torch.autograd.grad(fused, model.embed.tokens.weight)
    plain = token_loss(model(src, tgt), targets, 0.1)
    (g_plain,) = torch.autograd.grad(plain, model.embed.tokens.weight)
    assert torch.allclose(fused, plain, atol=1e-6) and torch.allclose(g_fused, g_plain, atol=1e-6)


class OperationCount(TorchDispatchMode):
    """Counts the operations dispatched below autograd: on a GPU each is a kernel launch."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def test_on_a_gpu_each_slice_of_the_loss_is_one_pass(monkeypatch):
    """A GPU takes the loss GPU_HEAD_ROWS rows a slice, each slice in one elementwise pass: about
    forty launches a slice, where the CPU's cache-sized passes make over a thousand in all. The
    GPU rule runs here through _chunk_rows, since this machine may have no GPU."""
    assert mt.loss._chunk_rows(torch.device("cuda"), 4096, 11) == 4096
    assert mt.loss._chunk_rows(torch.device("cpu"), 4096, 11) == mt.loss.CHUNK_ROWS
    torch.manual_seed(0)
    states, head = torch.randn(9000, 8, requires_grad=True), torch.nn.Linear(8, 11)
    targets = torch.randint(1, 11, (9000,))
    targets[-500:] = PAD
    launches, rule = {}, mt.loss._chunk_rows
    for layout, rows in (("cpu", mt.loss.HEAD_ROWS), ("cuda", mt.loss.GPU_HEAD_ROWS)):
        with monkeypatch.context() as patch:
            patch.setattr(mt.loss, "_chunk_rows", lambda _device, n, v, kind=torch.device(layout): rule(kind, n, v))
            patch.setattr(mt.loss, "_mostly_real_rows", lambda x, t: (x, t))  # a GPU keeps every row
            with OperationCount() as counted:
                loss = head_loss(states, head, targets, 0.1, rows=rows)
                grads = torch.autograd.grad(loss, [states, head.weight])
            launches[layout] = counted.count
        reference = token_loss(head(states), targets, 0.1)
        assert torch.allclose(loss, reference, atol=1e-6)
        for g, r in zip(grads, torch.autograd.grad(reference, [states, head.weight])):
            assert torch.allclose(g, r, atol=1e-6)
    assert launches["cuda"] < 200 < 1500 < launches["cpu"]  # 126 and 1,842 when written


@pytest.mark.parametrize("multiple,expected_rows", [(4, 12), (1, 11), (64, 15)])
def test_mostly_real_rows_keeps_every_real_row_and_rounds_the_count_up(multiple, expected_rows):
    targets = torch.arange(1, 16).reshape(3, 5)
    targets[0, 3:] = PAD
    targets[2, 1:3] = PAD
    states = torch.arange(15.0)[:, None].expand(15, 2)
    rows_states, rows_targets = mt.loss._mostly_real_rows(states, targets.reshape(-1), multiple)
    real = targets.reshape(-1)[targets.reshape(-1) != PAD]
    assert len(rows_targets) == expected_rows
    kept_real = rows_targets != PAD
    assert torch.equal(rows_targets[kept_real], real)  # every real row, in order
    assert torch.equal(rows_states[kept_real, 0].long() + 1, real)  # each with its own state


def _small_transformer():
    torch.manual_seed(0)
    return Transformer(
        vocab_size=13, max_len=64, enc_layers=1, dec_layers=1, n_head=2, d_model=8, d_ff=16, dropout=0.0, bias=True
    )


def _batch(sentences: int, length: int):
    src, tgt = torch.randint(4, 13, (sentences, length)), torch.randint(4, 13, (sentences, length))
    targets = torch.randint(4, 13, (sentences, length))
    targets[0, length // 2 :] = PAD
    return src, tgt, targets


def test_the_compiled_loss_equals_the_eager_one_in_value_and_gradient():
    """Under torch.compile the loss is taken whole in standard operations (_compiled_loss)."""
    model = _small_transformer()
    compiled = torch.compile(model, backend="eager", fullgraph=True)  # Dynamo's tracing, no code generation
    src, tgt, targets = _batch(3, 7)
    eager = model(src, tgt, targets=targets, label_smoothing=0.1)
    (g_eager,) = torch.autograd.grad(eager, model.embed.tokens.weight)
    traced = compiled(src, tgt, targets=targets, label_smoothing=0.1)
    (g_traced,) = torch.autograd.grad(traced, model.embed.tokens.weight)
    assert torch.allclose(traced, eager, atol=1e-6) and torch.allclose(g_traced, g_eager, atol=1e-6)


def test_compiled_training_does_not_recompile_for_every_batch_shape():
    """With the loss over slices of rows Dynamo specialised the graph on each batch's row count and
    recompiled the whole forward for every new shape, up to its limit (on an H200 the translation
    recipe finished no step in 195 s). Now the second shape makes the sizes dynamic and the rest reuse it."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter, model = CompileCounter(), _small_transformer()
    compiled = torch.compile(model, backend=counter)
    shapes = [(3, 7), (5, 9), (2, 16), (7, 5), (4, 24), (6, 11), (9, 8), (3, 31)]
    for sentences, length in shapes:
        src, tgt, targets = _batch(sentences, length)
        compiled(src, tgt, targets=targets, label_smoothing=0.1).backward()
    assert counter.frame_count <= 3 < len(shapes)


def test_on_a_cpu_a_larger_vocabulary_takes_fewer_rows_a_pass():
    """About CHUNK_ELEMENTS logits a pass (8 MB of fp32), never more than CHUNK_ROWS rows nor fewer than 8."""
    cpu, rows = torch.device("cpu"), mt.loss._chunk_rows
    assert rows(cpu, 1024, 8000) == rows(cpu, 1024, 16384) == mt.loss.CHUNK_ROWS == 128  # the 8k recipes: as tuned
    assert rows(cpu, 1024, 59514) == 35  # OPUS-MT's vocabulary
    assert rows(cpu, 1024, 10**6) == 8

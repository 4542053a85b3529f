"""The training loss: label-smoothed cross-entropy per target token, padding ignored, equal to
`F.cross_entropy(..., ignore_index=PAD, label_smoothing=...)` in value and gradient.

`token_loss` takes logits. `head_loss` takes the states before the output layer and applies the
layer itself, a slice of rows at a time, so the (N, V) logits and log-probabilities never exist
whole: on a CPU they would be the two largest tensors of a translation step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mt.data.vocab import PAD

HEAD_ROWS = 1024  # rows of logits alive at once in head_loss on a CPU: 32 MB in fp32 over an 8k vocabulary
# On a CPU, rows of fp32 log-probabilities per pass of the elementwise work: 4 MB over an 8k
# vocabulary, so the passes after the first run in cache and no allocation is large enough for
# glibc to map fresh, page-faulting memory each time...
CHUNK_ROWS = 128
# ...and fewer over a larger vocabulary (OPUS-MT's 59k pieces), so that a pass stays within 8 MB.
CHUNK_ELEMENTS = 1 << 21
# On a GPU every operation is a kernel launch that costs the host microseconds, and the CPU's small
# passes made the loss 5,165 of a Transformer-base step's 8,078 operations at 800 x 32 target rows
# (mt.bench's batch). There a slice is 4,096 rows (128 MB of fp32 log-probabilities over an 8k
# vocabulary), each taken in one pass: the loss is then 281 operations, the step 3,230.
GPU_HEAD_ROWS = 4096
ROW_MULTIPLE = 64  # on CPU head_loss rounds its row count up to this (_mostly_real_rows)


def _smoothed_nll(logp: torch.Tensor, targets: torch.Tensor, smoothing: float) -> torch.Tensor:
    """Per-row loss from (N, V) log-probabilities; padding rows count zero."""
    per_token = -logp.gather(1, targets[:, None]).squeeze(1)
    if smoothing:
        per_token = (1 - smoothing) * per_token - smoothing * logp.mean(dim=-1)
    return per_token * (targets != PAD)


def _logp_to_grad_(logp: torch.Tensor, targets: torch.Tensor, smoothing: float) -> torch.Tensor:
    """The gradient of the summed per-row loss with respect to the logits, written over `logp`:
    softmax minus the smoothed one-hot target, zero on padding rows."""
    g = logp.exp_()
    if smoothing:
        g.sub_(smoothing / g.size(1))
    g.scatter_add_(1, targets[:, None], torch.full((targets.size(0), 1), smoothing - 1.0, device=g.device))
    return g.mul_((targets != PAD)[:, None])


def _chunk_rows(device: torch.device, rows: int, vocab: int) -> int:
    """Rows per elementwise pass: a cache's worth on a CPU, the whole slice elsewhere."""
    return min(CHUNK_ROWS, max(8, CHUNK_ELEMENTS // max(vocab, 1))) if device.type == "cpu" else max(rows, 1)


def _loss_sum(logits: torch.Tensor, targets: torch.Tensor, smoothing: float) -> torch.Tensor:
    """The summed loss of (N, V) logits in fp32, a chunk of rows at a time (_chunk_rows)."""
    chunk = _chunk_rows(logits.device, *logits.shape)
    pieces = zip(logits.split(chunk), targets.split(chunk))
    return sum(_smoothed_nll(torch.log_softmax(c.float(), dim=-1), t, smoothing).sum() for c, t in pieces)


def _loss_and_grad_(logits: torch.Tensor, targets: torch.Tensor, smoothing: float) -> torch.Tensor:
    """The summed loss of (N, V) logits in fp32, a chunk of rows at a time (_chunk_rows); the
    logits are overwritten with the gradient of that sum, in their own dtype."""
    total = torch.zeros((), device=logits.device)
    rows = _chunk_rows(logits.device, *logits.shape)
    for start in range(0, logits.size(0), rows):
        chunk, t = logits[start : start + rows], targets[start : start + rows]
        logp = torch.log_softmax(chunk.float(), dim=-1)
        total += _smoothed_nll(logp, t, smoothing).sum()
        chunk.copy_(_logp_to_grad_(logp, t, smoothing))
    return total


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Three passes over the logits instead of the ten or so of F.cross_entropy's forward and
    backward: the log-softmax saved in the forward becomes the gradient in place. Over an 8k
    vocabulary this was a quarter of a CPU training step."""

    @staticmethod
    def forward(ctx, logits, targets, smoothing: float):
        logp = torch.log_softmax(logits.float(), dim=-1)  # (N, V)
        count = (targets != PAD).sum().clamp(min=1)
        ctx.save_for_backward(logp, targets, count)
        ctx.smoothing, ctx.dtype = smoothing, logits.dtype
        return _smoothed_nll(logp, targets, smoothing).sum() / count

    @staticmethod
    def backward(ctx, grad):
        logp, targets, count = ctx.saved_tensors
        g = _logp_to_grad_(logp, targets, ctx.smoothing)  # the saved buffer: it is not needed again
        return g.mul_(grad / count).to(ctx.dtype), None, None


def token_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean loss per target token over (..., V) logits and (...) targets."""
    return _SmoothedCrossEntropy.apply(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), float(label_smoothing))


def _matmul_dtype(weight: torch.Tensor) -> torch.dtype:
    """The dtype autocast would run a matmul with `weight` in: its own where autocast is off."""
    kind = weight.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else weight.dtype


class _HeadCrossEntropy(torch.autograd.Function):
    """Output layer and loss over slices of rows. The loss ends the graph, so each slice's
    gradient is known (up to the incoming scale) while its logits are at hand: it is taken there
    and then, and backward only scales it. The matmuls are those of the layer's own forward and
    backward, and run in autocast's dtype as they would there."""

    @staticmethod
    def forward(ctx, states, weight, bias, targets, smoothing: float, rows: int):
        count = (targets != PAD).sum().clamp(min=1)
        total = torch.zeros((), device=states.device)
        grad_states = torch.empty_like(states)
        grad_weight = grad_bias = None
        w = weight.to(_matmul_dtype(weight))  # cast once, not in each slice's three matmuls
        for start in range(0, states.size(0), rows):
            x, t = states[start : start + rows], targets[start : start + rows]
            g = F.linear(x, w, bias)  # the logits, overwritten with their gradient below
            total += _loss_and_grad_(g, t, smoothing)
            grad_states[start : start + rows] = g @ w.to(g.dtype)
            part = (g.t() @ x.to(g.dtype)).float()
            grad_weight = part if grad_weight is None else grad_weight.add_(part)
            if bias is not None:
                grad_bias = g.sum(0).float() if grad_bias is None else grad_bias.add_(g.sum(0))
        if grad_weight is None:  # no rows
            grad_weight = torch.zeros_like(weight)
            grad_bias = torch.zeros_like(bias) if bias is not None else None
        ctx.save_for_backward(grad_states, grad_weight, grad_bias, count)
        return total / count

    @staticmethod
    def backward(ctx, grad):
        grad_states, grad_weight, grad_bias, count = ctx.saved_tensors
        scale = grad / count
        return (
            grad_states * scale,
            grad_weight * scale,
            grad_bias * scale if grad_bias is not None else None,
            None,
            None,
            None,
        )


def _mostly_real_rows(states: torch.Tensor, targets: torch.Tensor, multiple: int | None = None):
    """The rows with real targets, then padding rows up to a multiple of `multiple`: padding
    counts zero in the loss, so its share of the largest matmuls is skipped, and the row count
    takes a few values only (oneDNN builds and keeps a kernel for each matmul shape)."""
    multiple = multiple or ROW_MULTIPLE
    real = targets != PAD
    n_real = int(real.sum())
    keep = min(-(-max(n_real, 1) // multiple) * multiple, targets.numel())
    if keep == targets.numel():
        return states, targets
    rows = torch.argsort(~real, stable=True)[:keep]  # real rows first, in order
    return states[rows], targets[rows]


def _compiled_loss(states, head, targets, smoothing: float) -> torch.Tensor:
    """The loss as torch.compile traces it: whole, in standard operations that inductor fuses.
    head_loss's loop over slices of rows would make Dynamo specialise the graph on each batch's
    row count, and its CPU row selection reads a count back (`.item()`), breaking the graph: with
    the recipe's batch shapes it recompiled the whole forward at every new shape until its limit."""
    return F.cross_entropy(head(states).float(), targets, ignore_index=PAD, label_smoothing=smoothing)


def head_loss(
    states: torch.Tensor,
    head: torch.nn.Linear,
    targets: torch.Tensor,
    label_smoothing: float = 0.0,
    rows: int | None = None,
) -> torch.Tensor:
    """token_loss(head(states), targets) for (..., D) states, taking the output layer `rows`
    rows at a time (default: HEAD_ROWS on a CPU, over the rows with real targets, see
    _mostly_real_rows; GPU_HEAD_ROWS elsewhere). Without gradients it computes the loss alone."""
    states, targets = states.reshape(-1, states.size(-1)), targets.reshape(-1)
    smoothing = float(label_smoothing)
    if torch.compiler.is_compiling():  # one graph for every batch size: see _compiled_loss
        return _compiled_loss(states, head, targets, smoothing)
    on_cpu = states.device.type == "cpu"
    rows = rows or (HEAD_ROWS if on_cpu else GPU_HEAD_ROWS)
    if on_cpu:  # where selecting rows costs no host-device synchronisation
        states, targets = _mostly_real_rows(states, targets)
    if torch.is_grad_enabled() and (states.requires_grad or head.weight.requires_grad):
        return _HeadCrossEntropy.apply(states, head.weight, head.bias, targets, smoothing, rows)
    total = sum(_loss_sum(head(x), t, smoothing) for x, t in zip(states.split(rows), targets.split(rows)))
    return total / (targets != PAD).sum().clamp(min=1)

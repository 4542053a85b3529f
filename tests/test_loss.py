"""The training loss: equal to PyTorch's cross-entropy in value and gradient, padding ignored."""

import pytest
import torch
import torch.nn.functional as F

from mt.data.tokenizer import PAD
from mt.model import token_loss


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

import pytest
import torch

from mt.cpu.dropout import Dropout, dropout, keep_mask


@pytest.mark.parametrize("p", [0.05, 0.1, 0.3, 0.5])
def test_masks_keep_one_minus_p_of_the_elements(p):
    torch.manual_seed(0)
    keep = keep_mask((1001, 999), p)  # an element count that is not a multiple of four
    assert keep.dtype == torch.bool and keep.shape == (1001, 999)
    assert abs(keep.float().mean().item() - (1 - p)) < 0.003
    # Each of the four 16-bit slices of a draw is a mask element of its own: all four keep 1 - p.
    by_slice = keep.flatten()[: 4 * (keep.numel() // 4)].view(-1, 4).float().mean(0)
    assert torch.allclose(by_slice, torch.full((4,), 1 - p), atol=0.006)


def test_masks_follow_the_seed():
    torch.manual_seed(3)
    a = keep_mask((64, 32), 0.1)
    torch.manual_seed(3)
    b = keep_mask((64, 32), 0.1)
    c = keep_mask((64, 32), 0.1)
    assert torch.equal(a, b) and not torch.equal(b, c)


def test_dropped_elements_are_zero_and_kept_ones_scaled_in_both_passes():
    torch.manual_seed(1)
    x = torch.randn(40, 50, requires_grad=True)
    w = torch.randn(40, 50)
    y = dropout(x, 0.25)
    kept = y != 0
    assert 0.6 < kept.float().mean().item() < 0.9
    torch.testing.assert_close(y[kept], x.detach()[kept] / 0.75)
    (y * w).sum().backward()
    torch.testing.assert_close(x.grad, torch.where(kept, w / 0.75, 0.0))


def test_the_module_is_the_identity_outside_training_and_at_zero():
    x = torch.randn(8, 16)
    layer = Dropout(0.5).eval()
    assert layer(x) is x
    assert Dropout(0.0).train()(x) is x
    assert not torch.equal(Dropout(0.5).train()(x), x)
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(1.0)


def test_the_expected_output_matches_the_input():
    torch.manual_seed(2)
    x = torch.randn(32)
    mean = torch.stack([dropout(x, 0.3) for _ in range(4000)]).mean(0)
    torch.testing.assert_close(mean, x, atol=0.08, rtol=0.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_mask_in_the_activations_dtype_gives_the_boolean_masks_results_to_the_bit(dtype):
    torch.manual_seed(4)
    x = torch.randn(300, 70).to(dtype).requires_grad_()
    w = torch.randn(300, 70).to(dtype)
    torch.manual_seed(5)
    keep = keep_mask(x.shape, 0.1)
    torch.manual_seed(5)
    assert torch.equal(keep_mask(x.shape, 0.1, dtype), keep.to(dtype))  # the same draws, the same mask
    torch.manual_seed(5)
    y = dropout(x, 0.1)
    saved = y.grad_fn.saved_tensors[0]
    assert saved.dtype == (dtype if dtype == torch.bfloat16 else torch.bool)  # two bytes, or one
    y.backward(w)
    scale = 1.0 / (1.0 - 0.1)
    assert torch.equal(y, x.detach().mul(keep).mul_(scale))
    assert torch.equal(x.grad, w.mul(keep).mul_(scale))

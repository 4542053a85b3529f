"""Opt-in int8 dynamic quantization of the Linear layers, for faster CPU translation."""

import warnings

import torch
import torch.nn as nn

from mt.errors import UserError


def _split_cross_queries(model: nn.Module) -> None:
    """Give each cross-attention its query rows as a Linear of their own, so that they quantize: the
    fused projection is used by slicing its weight, which a quantized module cannot be."""
    for name, m in model.named_modules():
        if name.endswith(".cross") and hasattr(m, "projection"):
            weight, bias = m.projection("q")
            query = nn.Linear(weight.size(1), weight.size(0), bias=bias is not None)
            query.weight.data.copy_(weight.data)
            if bias is not None:
                query.bias.data.copy_(bias.data)
            m.query = query


class Int8Linear(nn.Module):
    """A dynamically quantized Linear that calls its operator straight away. PyTorch's module does
    the same call behind a Python dtype and version check, which cost about 15 us of a 40 us call
    on the few rows of a late decoding step (22 such calls a step)."""

    def __init__(self, quantized: nn.Module):
        super().__init__()
        self.packed = quantized._packed_params._packed_params  # int8 weights and float bias, packed for fbgemm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic(x, self.packed, True)  # 7-bit activations, as the module


def _thin(model: nn.Module) -> nn.Module:
    """Every dynamically quantized Linear of `model` replaced by an Int8Linear on the same weights."""
    for name, m in list(model.named_modules()):
        if isinstance(m, torch.ao.nn.quantized.dynamic.Linear):
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, Int8Linear(m))
    return model


def quantize_int8(model: nn.Module) -> nn.Module:
    """Weights to int8, activations quantized on the fly. Cross-attention's keys and values (computed
    once per sentence) stay in float."""
    if next(model.parameters()).device.type != "cpu":
        raise UserError("--quantize int8 is for CPU inference; drop it or use --device cpu")
    _split_cross_queries(model)
    names = {name for name, m in model.named_modules() if isinstance(m, nn.Linear) and not name.endswith("cross.qkv")}
    with warnings.catch_warnings():  # PyTorch marks its quantized tensor types as deprecated
        warnings.simplefilter("ignore")
        return _thin(torch.ao.quantization.quantize_dynamic(model, names, dtype=torch.qint8))

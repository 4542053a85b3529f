"""Opt-in int8 dynamic quantization of the Linear layers, for faster CPU translation."""

import warnings

import torch
import torch.nn as nn

from mt.errors import UserError


def quantize_int8(model: nn.Module) -> nn.Module:
    """Weights to int8, activations quantized on the fly. Cross-attention's fused projection stays
    in float: it is used by slicing its weight into query and key/value rows."""
    if next(model.parameters()).device.type != "cpu":
        raise UserError("--quantize int8 is for CPU inference; drop it or use --device cpu")
    names = {name for name, m in model.named_modules() if isinstance(m, nn.Linear) and not name.endswith("cross.qkv")}
    with warnings.catch_warnings():  # PyTorch marks its quantized tensor types as deprecated
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, names, dtype=torch.qint8)

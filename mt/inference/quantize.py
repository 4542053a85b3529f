"""Opt-in int8 dynamic quantization of the Linear layers, for faster CPU translation."""

import warnings

import torch
import torch.nn as nn

from mt.errors import UserError


def _linear_of(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Linear:
    layer = nn.Linear(weight.size(1), weight.size(0), bias=bias is not None)
    layer.weight.data.copy_(weight.data)
    if bias is not None:
        layer.bias.data.copy_(bias.data)
    return layer


def _split_cross_projections(model: nn.Module) -> None:
    """Give each cross-attention its query rows and its key/value rows as Linears of their own, so
    that they quantize: the fused projection is used by slicing its weight, which a quantized module
    cannot be."""
    for name, m in model.named_modules():
        if name.endswith(".cross") and hasattr(m, "projection"):
            m.query, m.key_value = _linear_of(*m.projection("q")), _linear_of(*m.projection("kv"))


class Int8Linear(nn.Module):
    """A dynamically quantized Linear that calls its operator straight away. PyTorch's module does
    the same call behind a Python dtype and version check, which cost about 15 us of a 40 us call
    on the few rows of a late decoding step (22 such calls a step)."""

    def __init__(self, quantized: nn.Module):
        super().__init__()
        self.packed = quantized._packed_params._packed_params  # int8 weights and float bias, packed for fbgemm
        self.reduce_range = True  # fbgemm quantizes activations to 7 bits, as the module does

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic(x, self.packed, self.reduce_range)

    def repack_for_onednn(self) -> None:
        """The same int8 weights, packed for oneDNN's kernels, which quantize activations to all 8 bits."""
        weight, bias = torch.ops.quantized.linear_unpack(self.packed)
        engine = torch.backends.quantized.engine
        torch.backends.quantized.engine = "onednn"  # packing follows the engine in force; calls follow the packing
        try:
            self.packed = torch.ops.quantized.linear_prepack(weight, bias)
        finally:
            torch.backends.quantized.engine = engine
        self.reduce_range = False


def _thin(model: nn.Module) -> nn.Module:
    """Every dynamically quantized Linear of `model` replaced by an Int8Linear on the same weights."""
    for name, m in list(model.named_modules()):
        if isinstance(m, torch.ao.nn.quantized.dynamic.Linear):
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, Int8Linear(m))
    return model


def _output_layer_on_onednn(model: nn.Module) -> nn.Module:
    """The output layer (D x V, the largest matmul of a decoding step) on oneDNN where PyTorch has it:
    for beam search's 320 rows x 256 x 8,000 it took 3.6 ms against fbgemm's 4.8 ms on a 2-core AMD
    EPYC with AVX-512 VNNI. The other layers stay on fbgemm, which was as fast or faster at their
    sizes (a 40 x 256 x 256 layer: 30 against 43 us)."""
    head = getattr(model, "head", None)
    if isinstance(head, Int8Linear) and "onednn" in torch.backends.quantized.supported_engines:
        head.repack_for_onednn()
    return model


def quantize_int8(model: nn.Module) -> nn.Module:
    """Weights to int8, activations quantized on the fly, cross-attention's key and value projection
    included (CTranslate2's int8 quantizes it too): in fp32 it took 7% of greedy decoding's time."""
    if next(model.parameters()).device.type != "cpu":
        raise UserError("--quantize int8 is for CPU inference; drop it or use --device cpu")
    _split_cross_projections(model)
    names = {name for name, m in model.named_modules() if isinstance(m, nn.Linear) and not name.endswith("cross.qkv")}
    with warnings.catch_warnings():  # PyTorch marks its quantized tensor types as deprecated
        warnings.simplefilter("ignore")
        return _output_layer_on_onednn(_thin(torch.ao.quantization.quantize_dynamic(model, names, dtype=torch.qint8)))

"""Opt-in int8 dynamic quantization of the Linear layers, for faster CPU translation."""

import copy
import threading
import warnings

import torch
import torch.nn as nn

from mt import hardware
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


# On CPUs with AMX int8 tiles, oneDNN's int8 kernels beat fbgemm's from about this much work a call
# (rows x inputs x outputs) up; below it fbgemm is faster (docs/cpu.md).
AMX_ONEDNN_FROM_MACS = 6_000_000


_ENGINE_SWITCH = threading.Lock()  # decoding threads pack a shortlist's rows side by side


def _packed_on(engine: str | None, weight: torch.Tensor, bias: torch.Tensor | None):
    """int8 weights and bias packed for `engine`'s kernels (None: the engine in force)."""
    with _ENGINE_SWITCH:
        before = torch.backends.quantized.engine
        torch.backends.quantized.engine = engine or before  # packing follows the engine; calls follow the packing
        try:
            return torch.ops.quantized.linear_prepack(weight, bias)
        finally:
            torch.backends.quantized.engine = before


def _packed_for_onednn(packed):
    """The same int8 weights and bias, packed for oneDNN's kernels (which quantize activations to all
    8 bits, where fbgemm takes 7)."""
    return _packed_on("onednn", *torch.ops.quantized.linear_unpack(packed))


class Int8Linear(nn.Module):
    """A dynamically quantized Linear that calls its operator straight away. PyTorch's module does
    the same call behind a Python dtype and version check, a large share of a call on the few rows
    of a late decoding step. With `large_calls_on_onednn`,
    calls of at least AMX_ONEDNN_FROM_MACS multiply-adds go to oneDNN's packing of the weights."""

    def __init__(self, quantized: nn.Module):
        super().__init__()
        self.packed = quantized._packed_params._packed_params  # int8 weights and float bias, packed for fbgemm
        self.reduce_range = True  # fbgemm quantizes activations to 7 bits, as the module does
        self.large_packed, self.large_from = None, 0  # oneDNN's packing, and the input size it takes over from

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.large_packed is not None and x.numel() >= self.large_from:
            return torch.ops.quantized.linear_dynamic(x, self.large_packed, False)
        return torch.ops.quantized.linear_dynamic(x, self.packed, self.reduce_range)

    def rows(self, ids: torch.Tensor) -> "Int8Linear":
        """This layer with output rows `ids` (A,) alone, packed for the same kernels: a shortlist's
        output layer, packed once a batch. In float (dequantized) it was slower than the whole int8
        layer (bench/shortlist.py)."""
        weight, bias = torch.ops.quantized.linear_unpack(self.packed)
        part = copy.copy(self)
        engine = None if self.reduce_range else "onednn"  # fbgemm's 7-bit activations, or oneDNN's 8
        part.packed = _packed_on(engine, weight.index_select(0, ids), None if bias is None else bias[ids])
        part.large_packed = None if self.large_packed is None else _packed_for_onednn(part.packed)
        return part

    def repack_for_onednn(self) -> None:
        """Every call on oneDNN's kernels."""
        self.packed, self.reduce_range = _packed_for_onednn(self.packed), False

    def large_calls_on_onednn(self) -> None:
        outputs = torch.ops.quantized.linear_unpack(self.packed)[0].size(0)
        self.large_packed, self.large_from = _packed_for_onednn(self.packed), -(-AMX_ONEDNN_FROM_MACS // outputs)


def _thin(model: nn.Module) -> nn.Module:
    """Every dynamically quantized Linear of `model` replaced by an Int8Linear on the same weights."""
    for name, m in list(model.named_modules()):
        if isinstance(m, torch.ao.nn.quantized.dynamic.Linear):
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, Int8Linear(m))
    return model


def _onednn_where_faster(model: nn.Module) -> nn.Module:
    """The output layer (D x V, the largest matmul of a decoding step) on oneDNN, where it is faster
    than fbgemm; the other layers stay on fbgemm, as fast or faster at their sizes, except that on
    CPUs with AMX int8 tiles their large calls go to oneDNN too (AMX_ONEDNN_FROM_MACS). Only on CPUs
    with int8 dot products (VNNI, AMX): without them oneDNN sums the 8-bit products in 16 bits,
    which saturate (fbgemm takes 7 bits there)."""
    if "onednn" not in torch.backends.quantized.supported_engines or not hardware.cpu_has_int8_dot_products():
        return model
    amx = "amx_int8" in hardware.cpu_flags()
    for name, m in model.named_modules():
        if isinstance(m, Int8Linear) and name == "head":
            m.repack_for_onednn()
        elif isinstance(m, Int8Linear) and amx:
            m.large_calls_on_onednn()
    return model


def quantize_int8(model: nn.Module) -> nn.Module:
    """Weights to int8, activations quantized on the fly, cross-attention's key and value projection
    included (CTranslate2's int8 quantizes it too). In place: the fp32 layers are replaced, not
    copied first, so loading an int8 model never holds two fp32 copies at once."""
    if next(model.parameters()).device.type != "cpu":
        raise UserError("--quantize int8 is for CPU inference; drop it or use --device cpu")
    _split_cross_projections(model)
    names = {name for name, m in model.named_modules() if isinstance(m, nn.Linear) and not name.endswith("cross.qkv")}
    with warnings.catch_warnings():  # PyTorch marks its quantized tensor types as deprecated
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(model, names, dtype=torch.qint8, inplace=True)
    return _onednn_where_faster(_thin(quantized))

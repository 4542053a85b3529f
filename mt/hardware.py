"""Device and precision, chosen once outside the training loop, and the hardware named for benchmarks."""

import contextlib
import platform
from pathlib import Path

import torch

from mt.errors import UserError


def pick_device(name: str) -> torch.device:
    """'auto' takes CUDA when present; asking for CUDA without it is a user error."""
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("train.device is 'cuda' but no CUDA device is visible; use train.device=cpu or auto")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # TF32 for any fp32 matmul left outside autocast
        torch.backends.cudnn.allow_tf32 = True
    return device


def uses_bf16(device: torch.device, precision: str) -> bool:
    """'auto' is bf16 on CUDA and fp32 on CPU: bf16 pays only on CPUs with bf16 matrix units
    (Intel AMX), so on CPU it is asked for by name."""
    return precision == "bf16" or (precision == "auto" and device.type == "cuda")


def autocast(device: torch.device, precision: str = "auto"):
    """The context forward passes run in: bf16 autocast (weights and optimizer stay fp32) or fp32."""
    if uses_bf16(device, precision):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def describe(device: torch.device) -> str:
    """The hardware a figure was measured on: the GPU's name, or the CPU's model and threads."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.machine())
    amx = any(line.startswith("flags") and " amx_bf16" in line for line in lines)  # bf16 matrix units
    return f"{name}{' with AMX' if amx else ''}, {torch.get_num_threads()} threads"

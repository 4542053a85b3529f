"""Device and precision, chosen once outside the training loop."""

import contextlib

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


def autocast(device: torch.device):
    """bf16 autocast on CUDA; full fp32 on CPU, where bf16 matmuls are rarely faster."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()

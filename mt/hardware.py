"""What the hardware offers: the device, the CPU's bf16 units, a C++ compiler, and a name for figures.

Asked once per process by mt.runtime, which turns the answers into settings.
"""

import contextlib
import functools
import os
import platform
from pathlib import Path

import torch

from mt.cpu import allocator
from mt.errors import UserError


def resolve_device(name: str) -> str:
    """The device a name means here: 'auto' is cuda when one is visible, else cpu."""
    if name != "auto":
        return name
    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_device(name: str) -> torch.device:
    """'auto' takes CUDA when present; asking for CUDA without it is a user error."""
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("device 'cuda' was asked for, but no CUDA device is visible; ask for cpu or auto instead")
    device = torch.device(resolve_device(name))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # TF32 for any fp32 matmul left outside autocast
        torch.backends.cudnn.allow_tf32 = True
    return device


def cpp_compiler() -> str | None:
    """The C++ compiler torch.compile (inductor) would build CPU kernels with (its own search: CXX,
    else g++), or None where none works. A PyTorch that keeps the search elsewhere is not checked."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
        from torch._inductor.exc import InvalidCxxCompiler
    except ImportError:  # torch.compile then reports a missing compiler in its own words
        return "(not checked)"
    try:
        return get_cpp_compiler()
    except InvalidCxxCompiler:
        return None


def require_cpp_compiler(device: torch.device, setting: str) -> None:
    """torch.compile finds out at the first step, in a long traceback, that no C++ compiler works for
    a CPU's kernels; say so in one line before anything runs. `setting` names what asked to compile."""
    if device.type == "cpu" and cpp_compiler() is None:
        cxx = os.environ.get("CXX")
        tried = f"CXX={cxx}" if cxx else "g++; CXX names another"
        raise UserError(
            f"{setting} on a CPU needs a C++ compiler for torch.compile's kernels, and none works here "
            f"({tried}): install one (Debian: apt-get install g++) or train without compiling"
        )


def prefer_memory_efficient_attention(device: torch.device) -> None:
    """On CUDA, SDPA's memory-efficient kernel for the translation model's short, masked sentences:
    faster there than cuDNN's and flash kernels (docs/results.md). Process-wide, like TF32: the
    translation runtime sets it, and the char GPT's long causal blocks keep flash."""
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)
        torch.backends.cuda.enable_flash_sdp(False)


@contextlib.contextmanager
def memory_efficient_attention_while(device: torch.device):
    """prefer_memory_efficient_attention for the length of a block, then the flags as they were: for
    a process that times the translation step beside the char GPT's (mt.bench), so each is timed
    with the kernels its training uses."""
    flags = torch.backends.cuda
    before = (flags.cudnn_sdp_enabled(), flags.flash_sdp_enabled())
    prefer_memory_efficient_attention(device)
    try:
        yield
    finally:
        flags.enable_cudnn_sdp(before[0])
        flags.enable_flash_sdp(before[1])


@functools.cache
def _cpuinfo(field: str) -> str | None:
    """The first value of `field` in /proc/cpuinfo (None where there is none), read once."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(field)), None)


def cpu_flags() -> set[str]:
    return set((_cpuinfo("flags") or "").split())


def onednn_isa_cap() -> str:
    """The instruction set the environment keeps oneDNN to (ONEDNN_MAX_CPU_ISA), 'ALL' where none."""
    return os.environ.get("ONEDNN_MAX_CPU_ISA", os.environ.get("DNNL_MAX_CPU_ISA", "ALL")).upper()


def kernels_capped_below_avx512() -> bool:
    """Whether the environment keeps PyTorch's or oneDNN's kernels below AVX-512
    (ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2, ...): then the bf16 units go unused."""
    isa = onednn_isa_cap()
    return not torch.backends.cpu.get_cpu_capability().startswith("AVX512") or not (
        isa == "ALL" or isa.startswith(("AVX512", "AVX10"))
    )


INT8_DOT_PRODUCTS = {"avx512_vnni", "avx_vnni", "amx_int8"}  # CPU flags of exact int8 multiply-adds
_BELOW_VNNI = {"SSE41", "AVX", "AVX2", "AVX512_CORE"}  # oneDNN ISA caps that leave them out


def cpu_has_int8_dot_products() -> bool:
    """Whether oneDNN may multiply int8 exactly here: the CPU has VNNI or AMX int8 and no
    ONEDNN_MAX_CPU_ISA keeps oneDNN below them (it then sums int8 products in 16 bits, which saturate)."""
    return bool(cpu_flags() & INT8_DOT_PRODUCTS) and onednn_isa_cap() not in _BELOW_VNNI


def cpu_has_bf16() -> bool:
    """Whether the CPU multiplies bf16 natively (AMX tiles or AVX-512 BF16 dot products) and the
    kernels may use it. Elsewhere bf16 is emulated and slower than fp32."""
    return bool(cpu_flags() & {"amx_bf16", "avx512_bf16"}) and not kernels_capped_below_avx512()


def uses_bf16(device: torch.device, precision: str) -> bool:
    """'auto' is bf16 on CUDA and on CPUs with native bf16 units (docs/cpu.md), else fp32."""
    if precision == "auto":
        return device.type == "cuda" or (device.type == "cpu" and cpu_has_bf16())
    return precision == "bf16"


def describe(device: torch.device) -> str:
    """The hardware a figure was measured on: the GPU's name, or the CPU's model, its bf16 units and
    threads, and tcmalloc where the process allocates with it."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name, flags = _cpuinfo("model name") or platform.machine(), cpu_flags()
    units = (
        " with AMX" if "amx_bf16" in flags else " with AVX-512 BF16" if "avx512_bf16" in flags else ", no bf16 units"
    )
    if kernels_capped_below_avx512() and "no bf16" not in units:
        units += f" (kernels capped at {torch.backends.cpu.get_cpu_capability()}: unused)"
    malloc = ", tcmalloc" if allocator.active() == "tcmalloc" else ""
    return f"{name}{units}, {torch.get_num_threads()} threads{malloc}"


if __name__ == "__main__":  # what mt's commands run on here: `python -m mt.hardware`
    device = pick_device("auto")
    print(f"{describe(device)}; training precision {'bf16' if uses_bf16(device, 'auto') else 'fp32'}")
    print(f"memory allocator: {allocator.report()}")
    if device.type == "cpu":
        compiler = cpp_compiler()
        print(f"torch.compile (train.compile=true): C++ compiler {compiler or 'none works here; install g++ for it'}")

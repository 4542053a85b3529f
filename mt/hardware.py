"""Device and precision, chosen once outside the training loop, and the hardware named for benchmarks."""

import contextlib
import functools
import os
import platform
from pathlib import Path

import torch

from mt import allocator
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
    whole Transformer-base training steps (bf16, 800 x 32 and 1,152 x 16 target tokens) ran 5-10%
    faster with it than with PyTorch's own choice, cuDNN's kernel, plain and compiled; flash is
    slower still at these lengths (docs/results.md, the H200). The switch is process-wide, like
    TF32, so the translation task sets it and the char GPT's long causal blocks keep flash."""
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


def cpu_has_bf16() -> bool:
    """Whether the CPU multiplies bf16 natively: Intel AMX tiles or AVX-512 BF16 dot products (AMD
    Zen 4 and later, Intel Cooper Lake and later). Elsewhere bf16 is emulated and slower than fp32."""
    return bool(cpu_flags() & {"amx_bf16", "avx512_bf16"})


def uses_bf16(device: torch.device, precision: str) -> bool:
    """'auto' is bf16 on CUDA and on CPUs with native bf16 (1.48x fp32's tokens/s for the
    CPU translation recipe's training step on a 2-core AMD EPYC with AVX-512 BF16, measured back to back)."""
    if precision == "auto":
        return device.type == "cuda" or (device.type == "cpu" and cpu_has_bf16())
    return precision == "bf16"


def emulated_bf16(device: torch.device, precision: str) -> bool:
    """bf16 asked for by name on a CPU without bf16 units, where PyTorch emulates it: the fr_en cpu
    block's step took 74 s there against 2.3 s in fp32 on the same AMD EPYC (docs/results.md)."""
    return device.type == "cpu" and precision == "bf16" and not cpu_has_bf16()


def inference_precision(device: torch.device) -> str:
    """Decoding runs in fp32 on CPU: its matmuls are small, so bf16 gains little there, and fp32 keeps
    translations identical from one CPU to the next. On CUDA it follows 'auto' (bf16)."""
    return "fp32" if device.type == "cpu" else "auto"


def autocast(device: torch.device, precision: str = "auto"):
    """The context forward passes run in: bf16 autocast (weights and optimizer stay fp32) or fp32."""
    if uses_bf16(device, precision):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


ONEDNN_KERNELS = 512  # compiled matmul kernels oneDNN keeps while training in bf16 on a CPU (its default: 1,024)
IDEEP_ENTRIES = 8  # bf16 matmul set-ups PyTorch's oneDNN wrapper, ideep, keeps besides (its default: 1,024)


def keep_weight_casts(device: torch.device, precision: str = "auto"):
    """Around a step's micro-batches: autocast keeps each weight's bf16 copy until its outermost
    context closes, so a context per micro-batch cast every weight anew for each (about 17 ms of
    a 0.7 s bf16 CPU step over four). A disabled context around them keeps the copies over all
    of them, drops them before the optimizer changes the weights, and leaves backward outside
    autocast. Per thread, as autocast's state is."""
    if uses_bf16(device, precision):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()


def bound_onednn_kernels(device: torch.device, precision: str) -> None:
    """Bound oneDNN's and ideep's caches when training in bf16 on a CPU. oneDNN runs those matmuls
    and keeps a compiled kernel for every shape it meets, up to 1,024, and translation batches come
    in hundreds of shapes. Evicted kernels are compiled again, which costs little on AVX-512
    BF16 (about 30 ms a step at 64 kernels) and much with AMX tiles: on a 2-core Xeon with AMX
    the fr_en cpu block trained 1.14x as fast at 256 kernels as at 64 and 1.24x at 1,024, and
    512 ran at 0.96x of 1,024; peak memory over 300 steps was 1,057 MB at 64, 1,228 at 512 and
    1,344 at 1,024. ideep, the C++ layer between PyTorch and oneDNN, keeps a second cache of its
    own for each matmul shape (`LRU_CACHE_CAPACITY`): on the fr_en cpu block it grew the heap in
    use by about 85 KB a micro-batch, from 436 to 521 MB over 300 steps, while at 8 entries it
    held 242 MB from step 50 to 200 (fp32 training: 237 MB), at the same speed, since oneDNN's
    cache is the one that saves the compiling. Both libraries read their setting when they first
    build a kernel, so this must run before the first bf16 matmul; a value the user set is kept."""
    if device.type == "cpu" and uses_bf16(device, precision):
        os.environ.setdefault("LRU_CACHE_CAPACITY", str(IDEEP_ENTRIES))
        os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_KERNELS))


def describe(device: torch.device) -> str:
    """The hardware a figure was measured on: the GPU's name, or the CPU's model, its bf16 units and
    threads, and tcmalloc where the process allocates with it (mt/allocator.py)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name, flags = _cpuinfo("model name") or platform.machine(), cpu_flags()
    units = (
        " with AMX" if "amx_bf16" in flags else " with AVX-512 BF16" if "avx512_bf16" in flags else ", no bf16 units"
    )
    malloc = ", tcmalloc" if allocator.active() == "tcmalloc" else ""
    return f"{name}{units}, {torch.get_num_threads()} threads{malloc}"


if __name__ == "__main__":  # what mt's commands run on here: `python -m mt.hardware`
    device = pick_device("auto")
    print(f"{describe(device)}; training precision {'bf16' if uses_bf16(device, 'auto') else 'fp32'}")
    print(f"memory allocator: {allocator.report()}")
    if device.type == "cpu":
        compiler = cpp_compiler()
        print(f"torch.compile (train.compile=true): C++ compiler {compiler or 'none works here; install g++ for it'}")

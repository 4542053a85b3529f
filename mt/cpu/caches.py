"""oneDNN's kernel caches, bounded for bf16 training on a CPU.

oneDNN runs bf16 matmuls on a CPU and keeps a compiled kernel for every shape it meets (up to 1,024
by default); translation batches come in hundreds of shapes, so the caches grow with the run.
ideep, the layer between PyTorch and oneDNN, keeps a second cache of its own per shape. Bounding
both holds memory flat at nearly the same speed (docs/cpu.md). Both libraries read the setting
when they first build a kernel, so this must run before the first bf16 matmul; a value the user
set is kept.
"""

import os

ONEDNN_KERNELS = 512  # compiled matmul kernels oneDNN keeps (its default: 1,024)
IDEEP_ENTRIES = 8  # matmul set-ups ideep keeps besides (its default: 1,024)


def bound_onednn_kernels() -> None:
    os.environ.setdefault("LRU_CACHE_CAPACITY", str(IDEEP_ENTRIES))
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_KERNELS))

"""glibc's heap between and within the phases of a process (docs/cpu.md).

Within a phase, `keep_freed_memory` has glibc keep freed blocks up to 32 MB for the next step
instead of mapping and zeroing each large tensor afresh. Across phases (training, then decoding)
`give_back` collects garbage and returns whole free pages, since the next phase asks for other
sizes; CPU training also `trim`s every few steps, as batch shapes change and kept blocks fragment.
Under tcmalloc (mt/cpu/allocator.py) glibc's settings reach an allocator the process does not use,
and `give_back` has tcmalloc return its free pages. `objects_left_alone` keeps a training loop's
garbage collections off the hundreds of thousands of objects the imports left.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc

from mt.cpu import allocator

# mallopt's parameters, from glibc's malloc.h
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 * 2**20  # glibc's largest: blocks up to 32 MB come from the heap, reused when freed
TRIM_THRESHOLD = 2**30  # free memory at the heap's top kept for the next step, not handed back


@functools.cache
def _libc_function(name: str):
    """A function of glibc, or None where the C library has no such function."""
    lib = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(lib), name) if lib else None
    except (OSError, AttributeError):
        return None


def keep_freed_memory() -> bool:
    """Have glibc keep freed blocks up to 32 MB for reuse (a training loop frees and asks for the
    same sizes every step) instead of mapping and zeroing them anew; True where glibc took it."""
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) & bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


@contextlib.contextmanager
def objects_left_alone():
    """Within, Python's cycle collector skips every object alive on entry. Those are mostly the
    imported modules' (PyTorch's compiler stack alone: about 360,000), and walking them made each
    full collection take 0.17-0.19 s: two a training evaluation, and more than half the time of a
    short run that evaluates often. They are handed back to the collector on the way out. Where
    something else froze objects first, it is left as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def give_back() -> bool:
    """Collect garbage, then return free heap pages to the system; True if the allocator released
    any (tcmalloc: True whenever it runs)."""
    gc.collect()
    return allocator.release_free_memory() or trim()


def trim() -> bool:
    """Return the heap's free pages to the system, without collecting garbage first (cheap enough
    for a training loop to call every few steps); True if glibc released any."""
    malloc_trim = _libc_function("malloc_trim")
    return bool(malloc_trim(0)) if malloc_trim is not None else False

"""mt.cpu.heap: freed heap pages go back to the system on request (give_back) and are kept for reuse
within a phase (keep_freed_memory), on glibc; nothing breaks elsewhere."""

import ctypes
import subprocess
import sys

import pytest

from mt.cpu import heap


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(heap._libc_function("malloc_trim") is None, reason="the C library has no malloc_trim (not glibc)")
def test_give_back_returns_pages_that_free_kept():
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(1024) for _ in range(60_000)]  # about 60 MB of small blocks on the heap
    for block in blocks:
        ctypes.memset(block, 1, 1024)  # touched: resident
    pin = libc.malloc(1024)  # a live block above them, so free() alone cannot shrink the heap
    for block in blocks:
        libc.free(block)
    kept = resident_bytes()
    assert heap.give_back() is True
    released = kept - resident_bytes()
    libc.free(pin)
    assert released > 30 * 2**20, f"only {released / 2**20:.1f} MB went back"


def test_give_back_is_safe_to_call_twice():
    assert isinstance(heap.give_back(), bool)
    assert isinstance(heap.give_back(), bool)


# Allocates a 24 MB block, touches it, frees it, twice; prints the page faults of the second time.
REUSE = """
import ctypes, resource, sys
from mt.cpu import heap
if sys.argv[1] == "keep":
    assert heap.keep_freed_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
size = 24 * 2**20
for _ in range(2):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    libc.free(block)
print(faults)
"""


@pytest.mark.skipif(heap._libc_function("mallopt") is None, reason="the C library has no mallopt (not glibc)")
def test_keep_freed_memory_reuses_a_freed_block_without_page_faults():
    def faults(mode: str) -> int:
        run = subprocess.run([sys.executable, "-c", REUSE, mode], capture_output=True, text=True, check=True)
        return int(run.stdout)

    pages = 24 * 2**20 // 4096
    assert faults("keep") < pages // 10
    assert faults("default") > pages // 2  # glibc's own policy maps the block afresh: what the call avoids


class Cycle:
    def __init__(self):
        self.me = self


def test_the_collector_skips_what_lived_before_and_still_collects_what_came_after():
    import gc
    import weakref

    assert gc.get_freeze_count() == 0  # nothing froze objects before this test
    old = Cycle()
    with heap.objects_left_alone():
        assert gc.get_freeze_count() > 0
        young = Cycle()
        gone = weakref.ref(young)
        kept = weakref.ref(old)
        del old, young
        gc.collect()
        assert gone() is None  # made inside: collected as usual
        assert kept() is not None  # alive on entry: left alone while inside
        with heap.objects_left_alone():  # nested (or frozen by someone else): left as it is
            pass
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert kept() is None  # handed back: collected

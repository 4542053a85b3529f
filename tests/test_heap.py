"""mt.heap.give_back: freed heap pages go back to the system (glibc), and nothing breaks elsewhere."""

import ctypes

import pytest

from mt import heap


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(heap._malloc_trim() is None, reason="the C library has no malloc_trim (not glibc)")
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

"""Hand freed heap memory back to the operating system between phases of a process.

glibc's allocator keeps the memory that freed tensors leave behind, for the next allocation of a
similar size. Inside a training loop that is what makes steps fast; across a change of phase
(training over, decoding the test sets next) the kept pages only add to the resident set, because
the next phase asks for other sizes. `give_back` collects Python's garbage and asks glibc to return
every whole free page; elsewhere (macOS, Windows, musl) it collects the garbage only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc


@functools.cache
def _malloc_trim():
    """glibc's `malloc_trim`, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def give_back() -> bool:
    """Collect garbage, then return free heap pages to the system; True if glibc released any."""
    gc.collect()
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False

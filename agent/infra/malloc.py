"""glibc's malloc, told not to keep the largest block the agent ever freed.

glibc serves blocks of at least its mmap threshold (128 KiB) with mmap and unmaps them when
freed, but each such free raises the threshold to the freed block's size (up to 32 MiB). From
then on blocks that large come from the allocating thread's arena, and what an arena frees
stays in it unless its top grows past the trim threshold, which follows at twice the mmap
threshold. A long-running agent then keeps, per thread arena, room for the largest burst it
ever had: the VPP soak (issue #27) saw the CNI worker's arena step by ~2 MiB after ~1,650
cycles, with the threshold at 2.07 MiB (read with gdb). Setting the threshold fixes it and
switches the raising off: large blocks are mapped and unmapped every time, as a short-lived
process would see them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # mallopt's parameter (malloc.h)
MMAP_THRESHOLD = 128 * 1024  # glibc's own starting value


def pin_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fixes glibc's mmap threshold (and so its trim threshold) for the process; False where
    the C library is not glibc (nothing to do there)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, threshold) != 1:
        log.warning("mallopt(M_MMAP_THRESHOLD, %d) refused", threshold)
        return False
    return True

"""agent/infra/malloc: with the mmap threshold pinned, a large block freed does not make later
large blocks come from (and stay in) malloc's arenas.

Test plan (each case in a fresh interpreter, glibc's state being per process; mallinfo2's
`hblks` counts the blocks malloc has mmapped now):
- glibc as it is: after a 4 MiB block was mapped and freed, a 1 MiB block is no longer mapped
  (the threshold followed the freed block): this is what the pin is for, so the test shows it;
- pinned (the agent's start does it): the 1 MiB block is mapped, as the first was.
"""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import ctypes, sys
from agent.infra import malloc

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks",
                                               "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
if sys.argv[1] == "pinned":
    assert malloc.pin_mmap_threshold()
before = libc.mallinfo2().hblks
big = libc.malloc(4 << 20)
libc.free(big)
block = libc.malloc(1 << 20)
print(libc.mallinfo2().hblks - before)
libc.free(block)
"""


def mapped_after_a_big_free(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                         check=True)
    return int(out.stdout)


def test_glibc_alone_serves_a_large_block_from_its_arena_after_a_larger_free() -> None:
    assert mapped_after_a_big_free("glibc") == 0


def test_pinned_a_large_block_is_mapped_whatever_was_freed_before() -> None:
    assert mapped_after_a_big_free("pinned") == 1

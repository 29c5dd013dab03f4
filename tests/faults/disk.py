"""A hostile disk for tests: a small tmpfs that can be made read-only or filled up.

`tmpfs(path, size)` mounts one in this machine's mount namespace (where agents under test run
too) and always unmounts it (lazily, should a process still hold it) when the block ends, also
after a failure; `read_only(path)` remounts it read-only for a block and writable again after.
"""

from __future__ import annotations

import contextlib
import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def remount(path: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True)


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    remount(path, "ro")
    try:
        yield
    finally:
        remount(path, "rw")


def fill(path: Path) -> Path:
    """Writes a file into `path` until its file system is full; returns it."""
    filler = path / "filler"
    with open(filler, "wb", buffering=0) as f:
        for size in (65536, 1):  # big blocks, then the last partial page byte by byte
            while True:
                try:
                    f.write(b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    return filler

"""Real network namespaces for tests, always removed again (also when the test fails).

- `unique(prefix)`: a short name (<= 15 bytes, fits an interface name) unique per process and call.
- `named_netns()`: a named namespace (/var/run/netns/<name>, as containerd gives), yields its
  path.
- `process_netns()`: a namespace held only by a process (`unshare -n sleep`), yields
  /proc/<pid>/ns/net, the form some runtimes give; the process is killed at the end.
- `entered(path)`: runs a block with the calling thread inside a namespace. The kernel driver works
  in the namespace of the thread that calls it, so tests run it inside a node namespace of their own
  and never touch the machine's routing.
- `NodeExecutor`: a thread pool whose threads all live in a node namespace (parallel attach tests).
- `run_in(path, *argv)` / `ping(path, addr)`: a command inside a namespace (via nsenter, which
  takes any path form).
"""

from __future__ import annotations

import ctypes
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def unique(prefix: str) -> str:
    """`prefix` + pid + random suffix, at most 15 characters."""
    name = f"{prefix}{os.getpid() % 10000}{secrets.token_hex(3)}"
    assert len(name) <= 15, name
    return name


def _setns(path_or_fd: str | int) -> None:
    fd = os.open(path_or_fd, os.O_RDONLY) if isinstance(path_or_fd, str) else path_or_fd
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), str(path_or_fd))
    finally:
        if isinstance(path_or_fd, str):
            os.close(fd)


@contextmanager
def named_netns(prefix: str = "tn") -> Iterator[str]:
    """A fresh named namespace; yields its path under /var/run/netns."""
    name = unique(prefix)
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield f"/var/run/netns/{name}"
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@contextmanager
def process_netns() -> Iterator[str]:
    """A namespace that only a process holds; yields /proc/<pid>/ns/net."""
    proc = subprocess.Popen(["unshare", "-n", "sleep", "600"])
    try:
        path = f"/proc/{proc.pid}/ns/net"
        own = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + 10
        # unshare runs after the fork: wait until the child is in its own namespace
        while os.readlink(path) == own:
            assert time.monotonic() < deadline, "unshare -n did not create a namespace"
            time.sleep(0.01)
        yield path
    finally:
        proc.kill()
        proc.wait()


@contextmanager
def entered(path: str) -> Iterator[None]:
    """The calling thread inside the namespace at `path` for the block, then back."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _setns(path)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)


class NodeExecutor(ThreadPoolExecutor):
    """Worker threads that all entered the namespace `path` (they die with the pool)."""

    def __init__(self, path: str, workers: int) -> None:
        super().__init__(max_workers=workers, initializer=_setns, initargs=(path,))


def run_in(path: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """Runs argv inside the namespace at `path`; output captured, never raises on failure."""
    return subprocess.run(
        ["nsenter", f"--net={path}", *argv], capture_output=True, text=True, check=False
    )


def ping(path: str, address: str, *, size: int | None = None, df: bool = False,
         retry: bool = True) -> bool:
    """A ping from inside `path` to `address` (an address of a test namespace only) answered;
    `size` bytes of payload, `df` with Don't Fragment set. With `retry`, a lost first try is
    tried again twice with a longer wait: on a loaded 2-core machine one echo (or the neighbor
    resolution before it) can take over a second; no answer to three is unreachable. Without
    it, one echo with a 2 s wait decides (checks that expect no answer)."""
    opts = [*(["-s", str(size)] if size is not None else []), *(["-M", "do"] if df else [])]
    if run_in(path, "ping", "-c1", "-W1" if retry else "-W2", *opts, address).returncode == 0:
        return True
    return retry and run_in(path, "ping", "-c2", "-i0.2", "-W2", *opts, address).returncode == 0

"""Files in the node's StateDir, and what the agent does when that disk misbehaves.

Two parts of the StateDir are the agent's: `pods/` (agent/state/local_records, a cache of the
node's records)
and `pending-deletes/` (agent/state/journal, DELs owed to etcd). Both write a file whole: a temp
file beside it, renamed over it; `write_whole` removes the temp file when any step fails (a full or
read-only disk must not collect 0-byte leftovers), and `sweep_temp_files` removes what a killed
agent left.

`DiskHealth` tells an operator about a failing part once: the first failure of a run is logged
as an ERROR naming the directory and the cause, later ones only at DEBUG (a node with 100 pods
and a read-only disk would otherwise log one error per pod and request), and the first success
after them as a WARNING that it works again. `problem` holds the cause meanwhile (/metrics).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


class DiskHealth:
    """Whether the last write or removal in one StateDir part worked, and why not."""

    def __init__(self, part: str, directory: Path, consequence: str) -> None:
        self.part = part
        self.directory = directory
        self.consequence = consequence  # what the agent does meanwhile, for the error line
        self._lock = threading.Lock()
        self._problem = ""
        self.failures = 0

    @property
    def problem(self) -> str:
        with self._lock:
            return self._problem

    def failed(self, action: str, exc: OSError) -> None:
        cause = describe(exc)
        with self._lock:
            first = not self._problem
            self._problem = f"cannot {action}: {cause}"
            self.failures += 1
        if first:
            log.error("StateDir %s is not usable (cannot %s: %s); %s. Not logged again until "
                      "it works (vswitch_cni_state_dir_writable{part=\"%s\"} is 0 meanwhile)",
                      self.directory, action, cause, self.consequence, self.part)
        else:
            log.debug("StateDir %s: cannot %s: %s", self.directory, action, cause)

    def succeeded(self) -> None:
        with self._lock:
            was, self._problem = self._problem, ""
        if was:
            log.warning("StateDir %s works again (after %s)", self.directory, was)


def describe(exc: OSError) -> str:
    """An OSError as one line without the path (the messages name the directory)."""
    if exc.strerror:
        return f"[Errno {exc.errno}] {exc.strerror}" if exc.errno else exc.strerror
    return str(exc)


def write_whole(path: Path, data: bytes, tmp: Path, durable: bool = False) -> None:
    """Writes `data` as `path` through `tmp` (renamed over it); with `durable`, fsync'd (file
    and directory). A failure removes the temp file and raises the OSError."""
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sweep_temp_files(directory: Path, stale: Callable[[Path, float], bool]) -> list[str]:
    """Removes the `*.tmp` files of `directory` for which `stale(path, age in seconds)` holds;
    returns their names. Errors are skipped (the next sweep tries again)."""
    removed: list[str] = []
    now = time.time()
    try:
        candidates = list(directory.glob("*.tmp"))
    except OSError:
        return removed
    for path in candidates:
        try:
            if stale(path, now - path.stat().st_mtime):
                path.unlink()
                removed.append(path.name)
        except OSError:
            continue
    if removed:
        log.info("removed %d temp files left in %s: %s", len(removed), directory,
                 ", ".join(sorted(removed)[:5]))
    return removed

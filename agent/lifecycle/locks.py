"""Per-pod serialization: requests for one attachment run one at a time, others in parallel.

The kubelet serializes operations per pod and runs different pods in parallel; the agent does
the same, so no node-wide lock exists anywhere. Locks are created on demand and dropped when no
request holds or waits for them, so the table never grows with pod churn.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator
from contextlib import contextmanager


class KeyedLocks:
    """A lock per key, reference counted."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[Hashable, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, *keys: Hashable) -> Iterator[None]:
        """Holds the locks of all `keys`, taken in a fixed order so two holders cannot deadlock."""
        ordered = sorted(set(keys), key=repr)
        taken: list[Hashable] = []
        try:
            for key in ordered:
                self._acquire(key)
                taken.append(key)
            yield
        finally:
            for key in reversed(taken):
                self._release(key)

    def _acquire(self, key: Hashable) -> None:
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        lock.acquire()

    def _release(self, key: Hashable) -> None:
        with self._guard:
            lock, users = self._locks[key]
            lock.release()
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)

"""The parts the lifecycle works with, built once by PodManager and passed down as they are: the
ADD steps, the checks and repairs get this, never the manager (no step calls back into it).

One part is the lifecycle's own, `KeyedLocks`: per-pod serialization, requests for one attachment
run one at a time, others in parallel. The kubelet serializes operations per pod and runs
different pods in parallel; the agent does the same, so no node-wide lock exists anywhere. Locks
are created on demand and dropped when no request holds or waits for them, so the table never
grows with pod churn.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from agent.dataplane import Dataplane
from agent.infra.metrics import Metrics
from agent.linux.netns import PodNetns
from agent.model.pod import PodKey, PodNetwork, PodRecord
from agent.state.journal import DeleteJournal
from agent.state.local_records import KnownRecords
from ipam import NodeAllocator


class PodStore(Protocol):
    """The part of agent/state/store the lifecycle uses (etcd in production)."""

    def put_pod(self, node_id: int, record: PodRecord) -> None: ...
    def update_pod(
        self, node_id: int, record: PodRecord, previous: PodRecord | None = None
    ) -> None: ...
    def delete_pod(
        self, node_id: int, key: PodKey, known: PodRecord | None = None
    ) -> PodRecord | None: ...
    def get_pod(self, node_id: int, key: PodKey) -> PodRecord | None: ...
    def list_pods(self, node_id: int) -> list[PodRecord]: ...


class PodSide(Protocol):
    """Pod-namespace configuration (agent/linux/pod_netns in production)."""

    def configure(
        self, pod: PodNetwork, gateway_mac: str, netns: PodNetns | None = None
    ) -> str: ...
    def check(self, pod: PodNetwork, gateway_mac: str, pod_mac: str) -> list[str]: ...


class PolicyHook(Protocol):
    """NetworkPolicy's part in the lifecycle (agent/netpol's controller in production): an ADD's
    rules before its pod side is configured, their removal by a DEL or the ADD's undo."""

    def admit(self, record: PodRecord, wiring: dict[str, Any] | None = None) -> None: ...
    def release(self, key: PodKey) -> None: ...


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


@dataclass
class Parts:
    """The collaborators of one node's lifecycle."""

    node_id: int
    store: PodStore
    dataplane: Dataplane
    pools: NodeAllocator
    mtu: int
    metrics: Metrics
    pod_side: PodSide
    journal: DeleteJournal | None
    known: KnownRecords
    locks: KeyedLocks
    policy: PolicyHook | None = None  # None: NetworkPolicy off (no Kubernetes API)


T = TypeVar("T")


class Part(Generic[T]):
    """An attribute of the manager that is one of its parts, read and written through `parts`
    (one place holds each part: a test may swap the store of a live manager)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: type | None = None) -> T:
        value: T = getattr(obj.parts, self.name)
        return value

    def __set__(self, obj: Any, value: T) -> None:
        setattr(obj.parts, self.name, value)

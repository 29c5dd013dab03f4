"""The parts the lifecycle works with, built once by PodManager and passed down as they are: the
ADD steps, the checks and repairs get this, never the manager (no step calls back into it).

Each part is named by a protocol here and built elsewhere: the store in agent/state, the pod side
in agent/linux, the per-attachment locks in agent/lifecycle/pods (the manager's own).
"""

from __future__ import annotations

from collections.abc import Hashable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

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


class Locks(Protocol):
    """The per-attachment locks (agent/lifecycle/pods.KeyedLocks in production)."""

    def hold(self, *keys: Hashable) -> AbstractContextManager[None]: ...


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
    locks: Locks
    policy: PolicyHook | None = None  # None: NetworkPolicy off (no Kubernetes API)

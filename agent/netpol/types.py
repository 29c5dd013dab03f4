"""What the policy controller hands a renderer, and what it expects of one and of its source.

A renderer enforces per *attachment* (one CNI ADD: container ID + interface), not per pod: while
a pod's sandbox is replaced the old and the new one are both live for a moment, with different
addresses, and the old one's DEL must not take the new one's rules away.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.model.pod import PodKey as AttachmentKey
from policy import Namespace, NetworkPolicy, Pod, PodPolicy
from policy import PodKey as K8sPod
from policy.model import IPAddress


@dataclass(frozen=True)
class Enforced:
    """One attachment's rules: its pod's compiled policy, the attachment's own addresses and
    its wiring (the record's `wiring`: host interface, the VPP interface index in `extra`)."""

    attachment: AttachmentKey
    pod: K8sPod
    policy: PodPolicy
    addresses: tuple[IPAddress, ...]
    wiring: Mapping[str, Any] = field(default_factory=dict)

    @property
    def isolated(self) -> bool:
        return self.policy.ingress.isolated or self.policy.egress.isolated


@dataclass(frozen=True)
class Counts:
    """Packets and bytes a policy's rules allowed, and those its isolation dropped."""

    allowed_packets: int = 0
    allowed_bytes: int = 0
    dropped_packets: int = 0
    dropped_bytes: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.allowed_packets + other.allowed_packets,
                      self.allowed_bytes + other.allowed_bytes,
                      self.dropped_packets + other.dropped_packets,
                      self.dropped_bytes + other.dropped_bytes)


class Renderer(Protocol):
    """One way of enforcing rules on the node. `apply` is the whole desired state of the node
    (attachments absent from it lose their rules); `apply_one` and `remove_one` are one
    attachment's, for the ADD and DEL paths. All three are idempotent."""

    name: str
    sctp: bool  # can it match SCTP ports (the compiler's `sctp=`)

    def apply(self, desired: Mapping[AttachmentKey, Enforced]) -> None: ...
    def apply_one(self, enforced: Enforced) -> None: ...
    def remove_one(self, key: AttachmentKey) -> None: ...
    def counters(self) -> Mapping[str, Counts]: ...


class PolicySource(Protocol):
    """The cluster as the Kubernetes cache holds it (agent/kube)."""

    def wait_synced(self, timeout: float) -> bool: ...
    def pods(self) -> list[Pod]: ...
    def namespaces(self) -> list[Namespace]: ...
    def policies(self) -> list[NetworkPolicy]: ...
    def pod(self, namespace: str, name: str) -> Pod | None: ...


__all__ = ["AttachmentKey", "Counts", "Enforced", "K8sPod", "PolicySource", "Renderer"]

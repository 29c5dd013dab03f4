"""What the policy controller hands a renderer, and what it expects of one and of its source.

A renderer enforces per *attachment* (one CNI ADD: container ID + interface), not per pod: while
a pod's sandbox is replaced the old and the new one are both live for a moment, with different
addresses, and the old one's DEL must not take the new one's rules away.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.infra.listwatch import Changes
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


Count = tuple[int, int]  # packets, bytes


@dataclass(frozen=True)
class Counts:
    """What a renderer's counters say, summed over this node. `allowed`: per policy
    ("namespace/name"), what its rules let through (a packet two policies' rule allows counts
    for both). `dropped`: per pod and isolated direction ("ingress", "egress"), what no rule
    allowed: a drop belongs to the isolation, which no single policy owns. Counters start
    again from zero when a pod's rules are replaced."""

    allowed: Mapping[str, Count] = field(default_factory=dict)
    dropped: Mapping[tuple[K8sPod, str], Count] = field(default_factory=dict)

    def __add__(self, other: Counts) -> Counts:
        return Counts(_sum(self.allowed, other.allowed), _sum(self.dropped, other.dropped))


def _sum(a: Mapping[Any, Count], b: Mapping[Any, Count]) -> dict[Any, Count]:
    out = dict(a)
    for key, (packets, octets) in b.items():
        have = out.get(key, (0, 0))
        out[key] = (have[0] + packets, have[1] + octets)
    return out


class Renderer(Protocol):
    """One way of enforcing rules on the node. `apply` is the whole desired state of the node
    (attachments absent from it lose their rules); `apply_one` and `remove_one` are one
    attachment's, for the ADD and DEL paths. All three are idempotent."""

    name: str
    sctp: bool  # can it match SCTP ports (the compiler's `sctp=`)

    def apply(self, desired: Mapping[AttachmentKey, Enforced]) -> None: ...
    def apply_one(self, enforced: Enforced) -> None: ...
    def remove_one(self, key: AttachmentKey) -> None: ...
    def counters(self) -> Counts: ...


class PolicySource(Protocol):
    """The cluster as the Kubernetes cache holds it (agent/kube)."""

    def wait_synced(self, timeout: float) -> bool: ...
    def pods(self) -> Mapping[K8sPod, Pod]: ...
    def pod_changes(self, since: tuple[int, int] | None) -> Changes[K8sPod, Pod]: ...
    def namespaces(self) -> Mapping[str, Namespace]: ...
    def policies(self) -> Mapping[K8sPod, NetworkPolicy]: ...
    def pod(self, namespace: str, name: str) -> Pod | None: ...


__all__ = ["AttachmentKey", "Count", "Counts", "Enforced", "K8sPod", "PolicySource",
           "Renderer"]

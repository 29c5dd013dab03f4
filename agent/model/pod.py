"""Pod identity and the pod record: the small state everything else is derived from."""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import asdict, dataclass, field
from typing import Any

IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def pod_label(namespace: str, name: str) -> str:
    """How logs and views name a pod. Runtimes outside Kubernetes send less than the kubelet
    (podman: K8S_POD_NAME only), so a missing part is said, never shown as `/name`."""
    if namespace and name:
        return f"{namespace}/{name}"
    if name:
        return f"{name} (no namespace)"
    return f"{namespace}/(no pod name)" if namespace else "(no pod name)"


@dataclass(frozen=True)
class PodKey:
    """A CNI attachment is identified by (container ID, interface name), per the CNI spec."""

    container_id: str
    ifname: str

    def __str__(self) -> str:
        return f"{self.container_id}/{self.ifname}"

    def digest(self, length: int = 11) -> str:
        """A short stable hex name part, used for interface names and MACs."""
        raw = f"{self.container_id}\0{self.ifname}".encode()
        return hashlib.sha256(raw).hexdigest()[:length]


@dataclass(frozen=True)
class PodNetwork:
    """What the dataplane and the pod side need to wire one attachment."""

    key: PodKey
    netns: str
    addresses: tuple[IPInterface, ...]  # pod addresses as /32 and /128
    gateways: tuple[IPAddress, ...]  # one per address family, same order as addresses
    mtu: int


@dataclass(frozen=True)
class Wiring:
    """What a dataplane driver created for a pod, stored in the pod record."""

    host_ifname: str  # host-side interface name (veth end or TAP host name)
    pod_mac: str  # MAC of the interface inside the pod
    gateway_mac: str  # MAC the pod's gateway neighbor points at
    extra: dict[str, str] = field(default_factory=dict)  # driver specifics (sw_if_index, ...)


@dataclass
class PodRecord:
    """The persisted state of one attachment (JSON in etcd)."""

    container_id: str
    ifname: str
    netns: str
    addresses: list[str]  # CIDR strings, /32 and /128
    gateways: list[str]
    pod_namespace: str = ""
    pod_name: str = ""
    pod_uid: str = ""
    cni_version: str = ""
    state: str = "adding"  # "adding" until wired, then "ready"
    wiring: dict[str, Any] = field(default_factory=dict)  # asdict(Wiring)
    mtu: int = 0
    created: float = 0.0
    # The netns's identity at ADD (agent.adding.netns_identity): "cookie:<n>", or "dev:inode" in
    # records written before cookies (the field keeps its first name: it is stored in etcd).
    netns_inode: str = ""

    @property
    def key(self) -> PodKey:
        return PodKey(self.container_id, self.ifname)

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> PodRecord:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    def network(self) -> PodNetwork:
        return PodNetwork(
            key=self.key,
            netns=self.netns,
            addresses=tuple(ipaddress.ip_interface(a) for a in self.addresses),
            gateways=tuple(ipaddress.ip_address(g) for g in self.gateways),
            mtu=self.mtu,
        )

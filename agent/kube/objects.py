"""The pure part of the reflector: the kinds, their keys, a Node's value, and one watch
event of the API (its JSON, decoded) as the Put/Delete/Bookmark the list+watch consumes.

A watch event maps as agent/infra/listwatch says: ADDED and MODIFIED -> Put (or Delete when the
object is refused: the cache must not keep an older version the parser accepted), DELETED ->
Delete, BOOKMARK -> Bookmark, ERROR with code 410 (Gone, "too old resource version") ->
WatchExpired (the stream is over; only a relist goes on), any other ERROR -> KubeError (a
broken watch: relist). Revisions are resourceVersion strings, opaque: only handed back to the
API. No I/O here.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

import policy
import services
from agent.infra.watchstream import Bookmark, Delete, Event, Put, WatchExpired

V = TypeVar("V")

# (namespace, name); the namespace is "" for the cluster-scoped kinds (Namespace, Node).
Key = tuple[str, str]
KubeEvent = Event[Key, V, str]
# A kind's converter: the object's JSON -> its value, raising ValueError (PolicyError is one)
# for an object it refuses.
Convert = Callable[[Mapping[str, object]], V]


class KubeError(Exception):
    """The API server or the connection to it failed: an HTTP error status, an ERROR event
    other than 410, a broken or malformed stream, a bad config. `status`: the HTTP (or the
    Status object's) code, 0 when there is none."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class NodeError(ValueError):
    """A Node the reflector refuses (no name, an InternalIP that is no IP address)."""


@dataclass(frozen=True)
class KubeNode:
    """What the agent needs of a Node: its name, uid and InternalIP addresses (policy exempts
    them: the kubelet's probes come from there)."""

    name: str
    uid: str = ""
    internal_ips: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...] = ()


def _field(obj: Mapping[str, object], name: str) -> Mapping[str, object]:
    value = obj.get(name)
    return value if isinstance(value, Mapping) else {}


def node_from_k8s(obj: Mapping[str, object]) -> KubeNode:
    """A v1 Node's JSON -> KubeNode (InternalIP addresses in the API's order, no repeats)."""
    meta = _field(obj, "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise NodeError(f"Node: metadata.name={name!r}: must be a non-empty string")
    ips: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    raw = _field(obj, "status").get("addresses")
    for i, entry in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(entry, Mapping) or entry.get("type") != "InternalIP":
            continue
        try:
            address = ipaddress.ip_address(str(entry.get("address")))
        except ValueError:
            raise NodeError(f"Node {name}: status.addresses[{i}].address="
                            f"{entry.get('address')!r}: not an IP address") from None
        if address not in ips:
            ips.append(address)
    uid = meta.get("uid")
    return KubeNode(name, uid if isinstance(uid, str) else "", tuple(ips))


@dataclass(frozen=True)
class Kind(Generic[V]):
    """One watched kind: its name (metrics, logs, on_change), its collection's path (the
    cluster-wide LIST/WATCH URL) and its converter."""

    name: str
    path: str
    namespaced: bool
    convert: Convert[V]

    def object_path(self, namespace: str, name: str) -> str:
        """The URL of one object (GET)."""
        if not self.namespaced:
            return f"{self.path}/{name}"
        group, resource = self.path.rsplit("/", 1)
        return f"{group}/namespaces/{namespace}/{resource}/{name}"


PODS: Kind[policy.Pod] = Kind("pods", "/api/v1/pods", True, policy.pod_from_k8s)
NAMESPACES: Kind[policy.Namespace] = Kind("namespaces", "/api/v1/namespaces", False,
                                          policy.namespace_from_k8s)
POLICIES: Kind[policy.NetworkPolicy] = Kind(
    "networkpolicies", "/apis/networking.k8s.io/v1/networkpolicies", True,
    policy.policy_from_k8s)
NODES: Kind[KubeNode] = Kind("nodes", "/api/v1/nodes", False, node_from_k8s)
# Watched only when the agent translates ClusterIPs itself (ServiceTranslation: vpp)
SERVICES: Kind[services.Service] = Kind("services", "/api/v1/services", True,
                                        services.service_from_k8s)
ENDPOINTSLICES: Kind[services.EndpointSlice] = Kind(
    "endpointslices", "/apis/discovery.k8s.io/v1/endpointslices", True,
    services.endpointslice_from_k8s)


def key_of(obj: Mapping[str, object]) -> Key:
    """(namespace, name) of an object; KubeError when it has no name."""
    meta = _field(obj, "metadata")
    namespace, name = meta.get("namespace") or "", meta.get("name")
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        raise KubeError(f"an object without a name: metadata={dict(meta)!r}")
    return namespace, name


def revision_of(obj: Mapping[str, object]) -> str:
    """The resourceVersion of an object (or of a list's metadata); KubeError when absent."""
    revision = _field(obj, "metadata").get("resourceVersion")
    if not isinstance(revision, str) or not revision:
        raise KubeError(f"no resourceVersion in {_field(obj, 'metadata')!r}")
    return revision


# A decoder: (key, object) -> value, or None when the object is refused (logged and counted
# by the caller's decoder: agent/kube/refusals).
Decode = Callable[[Key, Mapping[str, object]], V | None]


def watch_event(raw: object, decode: Decode[V]) -> KubeEvent[V]:
    """One line of a watch (decoded JSON) -> Put, Delete or Bookmark; raises WatchExpired for
    410 Gone and KubeError for any other ERROR or a line that is no watch event."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("object"), Mapping):
        raise KubeError(f"not a watch event: {str(raw)[:200]}")
    kind, obj = raw.get("type"), raw["object"]
    if kind == "ERROR":
        code, message = obj.get("code"), obj.get("message") or obj.get("reason") or "error"
        if code == 410:
            raise WatchExpired(f"410 Gone: {message}")
        raise KubeError(f"watch error {code}: {message}", code if isinstance(code, int) else 0)
    revision = revision_of(obj)
    if kind == "BOOKMARK":
        return Bookmark(revision)
    key = key_of(obj)
    if kind == "DELETED":
        return Delete(key, revision)
    if kind in ("ADDED", "MODIFIED"):
        value = decode(key, obj)
        return Delete(key, revision) if value is None else Put(key, value, revision)
    raise KubeError(f"unknown watch event type {kind!r}")

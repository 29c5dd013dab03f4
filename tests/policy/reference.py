"""An independent, direct reading of the NetworkPolicy spec, for the property tests to compare the
compiler against: is one connection allowed? It works on the raw Kubernetes objects (dicts), not
on policy.model, and shares no code with the compiler (its own selector matching, defaulting,
CIDR and named-port handling), so that a misreading in either shows up as a difference.

`compiled_allows` reads a compiled PodPolicy the way a renderer would: exemptions, isolation,
then any rule whose peers hold the address and whose ports hold (protocol, port).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policy import PodPolicy

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Conn:
    """One connection seen from a pod: the remote address (ingress: the source; egress: the
    destination), the protocol ("ICMP" stands for any protocol without ports) and the port."""

    remote: Address
    protocol: str
    port: int


@functools.cache
def _net(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(cidr, strict=False)  # host bits: the API reads the network


def selects(selector: Obj, labels: Mapping[str, str]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for term in selector.get("matchExpressions") or ():
        key, op, values = term["key"], term["operator"], term.get("values") or ()
        present = key in labels
        ok = {"In": present and labels.get(key) in values,
              "NotIn": not present or labels.get(key) not in values,
              "Exists": present, "DoesNotExist": not present}[op]
        if not ok:
            return False
    return True


def pod_ips(pod: Obj) -> list[Address]:
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return []
    ips = [e["ip"] for e in status.get("podIPs") or ()] or \
        ([status["podIP"]] if status.get("podIP") else [])
    return [ipaddress.ip_address(ip) for ip in ips]


def named_ports(pod: Obj) -> list[tuple[str, str, int]]:
    spec = pod.get("spec") or {}
    containers = list(spec.get("containers") or ()) + [
        c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"]
    return [(p["name"], p.get("protocol") or "TCP", p["containerPort"])
            for c in containers for p in c.get("ports") or () if p.get("name")]


class Reference:
    def __init__(self, pods: Sequence[Obj], namespaces: Sequence[Obj], policies: Sequence[Obj],
                 node_addresses: Mapping[str, Sequence[Address]], sctp: bool) -> None:
        self.policies = policies
        self.sctp = sctp
        self.node_addresses = node_addresses
        self._cache: dict[tuple[str, str, str], list[Obj]] = {}
        self.ns_labels: dict[str, dict[str, str]] = {}
        for ns in namespaces:
            name = ns["metadata"]["name"]
            self.ns_labels[name] = {**(ns["metadata"].get("labels") or {}),
                                    "kubernetes.io/metadata.name": name}
        # the pods policy knows: not host-network; by address, for peers and egress named ports
        self.by_ip: dict[Address, Obj] = {}
        self.ips: dict[tuple[str, str], list[Address]] = {}
        self.named: dict[tuple[str, str], list[tuple[str, str, int]]] = {}
        for pod in pods:
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            self.ips[key], self.named[key] = pod_ips(pod), named_ports(pod)
            if not (pod.get("spec") or {}).get("hostNetwork"):
                for ip in self.ips[key]:
                    self.by_ip[ip] = pod

    def _labels_of_ns(self, name: str) -> dict[str, str]:
        return self.ns_labels.get(name, {"kubernetes.io/metadata.name": name})

    @staticmethod
    def types(policy: Obj) -> set[str]:
        spec = policy.get("spec") or {}
        declared = spec.get("policyTypes")
        if declared:
            return set(declared)
        return {"Ingress", "Egress"} if spec.get("egress") else {"Ingress"}

    def governing(self, pod: Obj, direction: str) -> list[Obj]:
        meta = pod["metadata"]
        return [p for p in self.policies
                if p["metadata"]["namespace"] == meta["namespace"]
                and selects((p.get("spec") or {}).get("podSelector") or {},
                            meta.get("labels") or {})
                and direction in self.types(p)]

    def _governing(self, pod: Obj, direction: str) -> list[Obj]:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"], direction)
        if key not in self._cache:
            self._cache[key] = self.governing(pod, direction)
        return self._cache[key]

    def _peer(self, peer: Obj, policy_ns: str, remote: Address) -> bool:
        if "ipBlock" in peer:
            block = peer["ipBlock"]
            return remote in _net(block["cidr"]) and not any(
                remote in _net(e) for e in block.get("except") or ())
        other = self.by_ip.get(remote)
        if other is None:
            return False
        ns = other["metadata"]["namespace"]
        if "namespaceSelector" in peer:
            ns_ok = selects(peer["namespaceSelector"], self._labels_of_ns(ns))
        else:
            ns_ok = ns == policy_ns
        pod_ok = "podSelector" not in peer or selects(peer["podSelector"],
                                                      other["metadata"].get("labels") or {})
        return ns_ok and pod_ok

    def _port(self, entry: Obj, conn: Conn, destination: Obj | None) -> bool:
        protocol = entry.get("protocol") or "TCP"
        if protocol != conn.protocol or (protocol == "SCTP" and not self.sctp):
            return False
        port = entry.get("port")
        if port is None:
            return True
        if isinstance(port, str):
            return destination is not None and (port, protocol, conn.port) in \
                self.named[(destination["metadata"]["namespace"],
                            destination["metadata"]["name"])]
        return bool(port <= conn.port <= (entry.get("endPort") or port))

    def allows(self, pod: Obj, direction: str, conn: Conn) -> bool:
        if conn.remote in self.node_addresses.get((pod.get("spec") or {}).get("nodeName") or "",
                                                  ()):
            return True  # the pod's node: always
        if conn.remote in self.ips[(pod["metadata"]["namespace"], pod["metadata"]["name"])]:
            return True  # the pod itself: always
        governing = self._governing(pod, direction)
        if not governing:
            return True
        destination = pod if direction == "Ingress" else self.by_ip.get(conn.remote)
        key = "from" if direction == "Ingress" else "to"
        for policy in governing:
            rules = (policy.get("spec") or {}).get(direction.lower()) or ()
            for rule in rules:
                peers, ports = rule.get(key) or (), rule.get("ports") or ()
                if peers and not any(self._peer(p, policy["metadata"]["namespace"], conn.remote)
                                     for p in peers):
                    continue
                if ports and not any(self._port(e, conn, destination) for e in ports):
                    continue
                return True
        return False


def compiled_allows(compiled: PodPolicy, direction: str, conn: Conn,
                    own: Sequence[Address]) -> bool:
    return _allows(compiled, direction, conn, own, shared=False)


def shared_allows(compiled: PodPolicy, direction: str, conn: Conn,
                  own: Sequence[Address]) -> bool:
    """`compiled_allows` read from the rules' shared form (sets' members + static peers)."""
    return _allows(compiled, direction, conn, own, shared=True)


def _allows(compiled: PodPolicy, direction: str, conn: Conn, own: Sequence[Address],
            shared: bool) -> bool:
    if conn.remote in compiled.node_addresses or conn.remote in own:
        return True
    rules = compiled.ingress if direction == "Ingress" else compiled.egress
    if not rules.isolated:
        return True
    if shared:
        assert rules.shared is not None, "the compiler gives every isolated direction both forms"
        peers = [({a for s in r.sets for a in s.members}, r.static, r.ports)
                 for r in rules.shared]
    else:
        peers = [(set(), r.peers, r.ports) for r in rules.rules]
    for members, nets, ports in peers:
        if conn.remote not in members and not any(conn.remote in net for net in nets):
            continue
        if ports is None or any(r.protocol == conn.protocol and r.first <= conn.port <= r.last
                                for r in ports):
            return True
    return False

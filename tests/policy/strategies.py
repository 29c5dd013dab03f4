"""Hypothesis strategies: small random clusters in the Kubernetes JSON shape (namespaces, pods with
labels, addresses and named ports, NetworkPolicies of every feature), valid by construction.

The values are drawn from small pools on purpose, so that selectors, CIDRs and ports collide
often: label keys app/tier with values a/b, three namespaces (one may lack its Namespace
object), pod addresses 10.0.0.x and fd00::x, CIDRs that cut through them, and port numbers
that the policies' numbers, ranges and the pods' named ports share.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from tests.policy.reference import Address, Conn

NAMESPACES = ["ns-a", "ns-b", "ns-c"]
NODES = {"n1": [ipaddress.ip_address("172.16.0.1")],
         "n2": [ipaddress.ip_address("172.16.0.2"), ipaddress.ip_address("fd00:ff::2")]}
PORTS = [53, 80, 81, 443, 8080]
PROBED_PORTS = [52, 53, 54, 80, 81, 82, 443, 444, 8080, 8081]
PORT_NAMES = ["http", "dns", "metrics"]
PROTOCOLS = ["TCP", "UDP", "SCTP"]
CIDRS = ["10.0.0.0/29", "10.0.0.4/30", "10.0.0.0/24", "0.0.0.0/0", "10.0.0.1/28",
         "fd00::/125", "fd00::/120", "::/0", "192.168.0.0/16", "172.16.0.0/30"]
EXCEPTS = ["10.0.0.2/32", "10.0.0.4/31", "10.0.0.0/30", "10.0.0.0/25", "10.0.0.128/25",
           "fd00::4/126", "fd00::1/128", "192.168.1.0/24", "172.16.0.1/32", "10.0.0.8/29"]
Obj = dict[str, Any]
Net = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass
class ClusterSpec:
    namespaces: list[Obj]
    pods: list[Obj]
    policies: list[Obj]
    sctp: bool
    extra: Obj = field(default_factory=dict)  # one more policy, for the additivity property

    def remotes(self) -> list[Address]:
        """Addresses worth probing: every pod's, nodes', and the edges of every CIDR."""
        found: set[Address] = {ipaddress.ip_address(a) for a in
                               ("8.8.8.8", "2001:db8::1", "10.0.0.200", "fd00::80")}
        found |= {ip for ips in NODES.values() for ip in ips}
        for pod in self.pods:
            status = pod["status"]
            found |= {ipaddress.ip_address(e["ip"]) for e in status.get("podIPs", ())}
        for cidr in CIDRS + EXCEPTS:
            net = ipaddress.ip_network(cidr, strict=False)
            found |= {net.network_address, net.broadcast_address}
            if int(net.broadcast_address) + 1 < (1 << net.max_prefixlen):
                found.add(net.broadcast_address + 1)
        return sorted(found, key=lambda a: (a.version, int(a)))

    def conns(self) -> list[Conn]:
        """Every remote address x every protocol x the ports that tell the pools apart: each
        number, one past it (the end of a single-port entry, or past a range's end) and one
        inside the lowest range; ICMP stands for the protocols without ports."""
        remotes = self.remotes()
        return [Conn(remote, protocol, port) for remote in remotes
                for protocol in PROTOCOLS for port in PROBED_PORTS] + \
            [Conn(remote, "ICMP", 0) for remote in remotes]


# the label vocabularies: pods' and namespaces' (a selector draws from the one it selects in,
# with a key of neither now and then, for Exists/DoesNotExist/NotIn on absent labels)
POD_LABELS = {"app": ["a", "b"], "tier": ["a", "b"]}
NS_LABELS = {"team": ["x", "y"], "kubernetes.io/metadata.name": NAMESPACES}


def label_sets(vocabulary: dict[str, list[str]]) -> st.SearchStrategy[dict[str, str]]:
    return st.fixed_dictionaries({}, optional={k: st.sampled_from(v)
                                               for k, v in vocabulary.items()})


labels = label_sets(POD_LABELS)


@st.composite
def selectors(draw: st.DrawFn, vocabulary: dict[str, list[str]] = POD_LABELS) -> Obj:
    """A label selector; often {} (everything), so that policies select and peers match."""
    out: Obj = {}
    if draw(st.integers(0, 2)) == 0:
        return out
    match = draw(label_sets(vocabulary))
    if match:
        out["matchLabels"] = match
    terms = []
    for _ in range(draw(st.integers(0, 2))):
        op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]))
        key = draw(st.sampled_from([*vocabulary, "zone"]))
        term: Obj = {"key": key, "operator": op}
        if op in ("In", "NotIn"):
            term["values"] = draw(st.lists(st.sampled_from([*vocabulary.get(key, ["a"]), "z"]),
                                           min_size=1, max_size=2, unique=True))
        terms.append(term)
    if terms:
        out["matchExpressions"] = terms
    return out


def strictly_inside(inner: Net, outer: Net) -> bool:
    return inner.version == outer.version and inner.prefixlen > outer.prefixlen and \
        int(outer.network_address) <= int(inner.network_address) <= int(outer.broadcast_address)


@st.composite
def ip_blocks(draw: st.DrawFn) -> Obj:
    cidr = draw(st.sampled_from(CIDRS))
    net = ipaddress.ip_network(cidr, strict=False)
    inside = [e for e in EXCEPTS if strictly_inside(ipaddress.ip_network(e), net)]
    block: Obj = {"cidr": cidr}
    if bool(inside) and draw(st.booleans()):
        block["except"] = draw(st.lists(st.sampled_from(inside), min_size=1, max_size=2))
    return block


@st.composite
def peers(draw: st.DrawFn) -> Obj:
    kind = draw(st.sampled_from(["pods", "namespaces", "both", "ipBlock"]))
    if kind == "ipBlock":
        return {"ipBlock": draw(ip_blocks())}
    peer: Obj = {}
    if kind in ("pods", "both"):
        peer["podSelector"] = draw(selectors())
    if kind in ("namespaces", "both"):
        peer["namespaceSelector"] = draw(selectors(NS_LABELS))
    return peer


@st.composite
def policy_ports(draw: st.DrawFn) -> Obj:
    entry: Obj = {}
    protocol = draw(st.sampled_from([None, *PROTOCOLS]))
    if protocol is not None:
        entry["protocol"] = protocol
    kind = draw(st.sampled_from(["none", "number", "range", "name"]))
    if kind == "name":
        entry["port"] = draw(st.sampled_from(PORT_NAMES))
    elif kind != "none":
        entry["port"] = draw(st.sampled_from(PORTS))
        if kind == "range":
            entry["endPort"] = draw(st.sampled_from([p for p in PORTS if p >= entry["port"]]))
    return entry


@st.composite
def rules(draw: st.DrawFn, peers_key: str) -> Obj:
    rule: Obj = {}
    chosen = draw(st.sampled_from(["missing", "empty", "some", "some"]))
    if chosen != "missing":
        rule[peers_key] = [] if chosen == "empty" else \
            draw(st.lists(peers(), min_size=1, max_size=2))
    chosen = draw(st.sampled_from(["missing", "empty", "some", "some"]))
    if chosen != "missing":
        rule["ports"] = [] if chosen == "empty" else \
            draw(st.lists(policy_ports(), min_size=1, max_size=2))
    return rule


@st.composite
def policies(draw: st.DrawFn, name: str) -> Obj:
    spec: Obj = {"podSelector": draw(selectors())}
    for key, peers_key in (("ingress", "from"), ("egress", "to")):
        chosen = draw(st.sampled_from(["missing", "empty", "some", "some", "some"]))
        if chosen != "missing":
            spec[key] = [] if chosen == "empty" else \
                draw(st.lists(rules(peers_key), min_size=1, max_size=2))
    types = draw(st.sampled_from([None, [], ["Ingress"], ["Egress"], ["Ingress", "Egress"]]))
    if types is not None:
        spec["policyTypes"] = types
    return {"metadata": {"namespace": draw(st.sampled_from(NAMESPACES)), "name": name},
            "spec": spec}


@st.composite
def pods(draw: st.DrawFn, index: int) -> Obj:
    family = draw(st.sampled_from(["v4", "v6", "dual", "dual", "none"]))
    ips = ([f"10.0.0.{index + 1}"] if family in ("v4", "dual") else []) + \
        ([f"fd00::{index + 1:x}"] if family in ("v6", "dual") else [])
    names = draw(st.lists(st.sampled_from(PORT_NAMES), max_size=2, unique=True))
    ports = [{"name": n, "containerPort": draw(st.sampled_from(PORTS)),
              "protocol": draw(st.sampled_from(PROTOCOLS))} for n in names]
    status: Obj = {"podIPs": [{"ip": ip} for ip in ips]}
    if draw(st.integers(0, 9)) == 0:
        status["phase"] = "Succeeded"
    return {"metadata": {"namespace": draw(st.sampled_from(NAMESPACES)), "name": f"pod-{index}",
                         "labels": draw(labels)},
            "spec": {"nodeName": draw(st.sampled_from(sorted(NODES))),
                     "hostNetwork": draw(st.integers(0, 9)) == 0,
                     "containers": [{"name": "c", "ports": ports}]},
            "status": status}


@st.composite
def clusters(draw: st.DrawFn, max_pods: int = 6, max_policies: int = 4) -> ClusterSpec:
    present = draw(st.lists(st.sampled_from(NAMESPACES), unique=True, max_size=3))
    namespaces = [{"metadata": {"name": n, "labels": draw(label_sets({"team": ["x", "y"]}))}}
                  for n in present]
    n_pods = draw(st.integers(1, max_pods))
    n_policies = draw(st.integers(1, max_policies))
    return ClusterSpec(namespaces, [draw(pods(i)) for i in range(n_pods)],
                       [draw(policies(f"policy-{i}")) for i in range(n_policies)],
                       draw(st.booleans()), draw(policies("policy-extra")))

"""Compiled NetworkPolicy -> the nftables objects of each pod (chains, counters, map and set
elements), by name: pure, no I/O; `transactions` turns them into commands.

The objects, all named `policy-...` in the agent's table (NAT's objects have other names):

    chain policy-forward   type filter hook forward priority filter; policy accept
        ct state established,related accept
        ct state new, TCP without a lone SYN, from or to a policed pod: drop
        ip saddr . ip daddr @policy-self4 accept      (ip6 likewise)
        ip saddr vmap @policy-egress4      ip6 saddr vmap @policy-egress6
        ip daddr vmap @policy-ingress4     ip6 daddr vmap @policy-ingress6
    map policy-{egress,ingress}{4,6}   pod address : jump policy-pod-<id>-{out,in}
    set policy-pods{4,6}               the addresses of the pods with an isolated direction
    set policy-self{4,6}               source . destination, both a policed pod's own: a pod
                                       to itself (a Service's hairpin), which the spec allows
    set policy-peer-<sel>-{4,6}        the pods one selector matches (<sel>: its PeerSet name),
                                       shared by every chain whose rules name that selector
    chain policy-pod-<id>-in|out       one per isolated direction of a pod:
        peer in node addresses: return
        per rule, per IP version, per protocol: peer in @policy-peer-... (one rule per set)
            or in {ipBlock CIDRs}, ports, counters: return
        counter policy-drop-<id>-<dir>; drop
    counter policy-allow-<id>-<dir>-<policy id>   per pod, direction and allowing policy

A chain names no address of its pod (its own are in policy-self, its peers in the peer sets):
its rules are the same before the pod has addresses, so the controller can make a scheduled
pod's chains before its ADD, which then adds elements only (docs/policy.md).

The chains come from the rules' shared form (policy.SetRule) when the compiler gave one: a pod
that joins or leaves a selector is then an element added to or deleted from that selector's
set, and no chain changes. Rules built without it (by hand) name their peers inline.

`return` and never `accept` in a pod chain: the base chain then goes on to the other end's
check, so a packet from pod A to pod B of this node passes A's egress and B's ingress. The
chains are matched by address, not interface, so the same rules judge Service traffic after
kube-proxy's DNAT (forward hook: after it, before masquerade). The no-SYN rule: a connection
whose conntrack entry a change deleted must not be picked up again mid-stream in the other
orientation (the server's next segment as a "new" connection its own side allows).

Counters are per policy, not per rule, and never deleted while their (pod, direction, policy)
stands: `add counter` keeps a counter's value, so a change leaves the counts of what it keeps.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from policy import DirectionRules, PodKey, PodPolicy
from policy.model import IPAddress, IPNetwork
from policy.rules import PortSet, shared_shape

Cmd = dict[str, Any]
Expr = list[dict[str, Any]]
Dir = Literal["ingress", "egress"]
DIRECTIONS: tuple[Dir, ...] = ("ingress", "egress")
VERSIONS = (4, 6)
PREFIX = "policy-"
BASE = "policy-forward"
_SHORT = {"ingress": "in", "egress": "out"}
# ingress matches the packet's source (the peer), egress its destination
_PEER_FIELD = {"ingress": "saddr", "egress": "daddr"}
POD_FIELD = {"ingress": "daddr", "egress": "saddr"}
COMMENT_MAX = 128  # nftables' limit on a comment


@dataclass(frozen=True)
class PodRules:
    """What a pod gets: its compiled policy and its own addresses (which the spec exempts)."""

    policy: PodPolicy
    addresses: tuple[IPAddress, ...]


@dataclass
class Rendered:
    """A set of pods' objects, by name (the unit of diffing)."""

    chains: dict[str, list[Expr]] = field(default_factory=dict)
    counters: dict[str, str] = field(default_factory=dict)  # name -> comment
    elements: dict[tuple[str, IPAddress], str] = field(default_factory=dict)  # (map, a) -> chain
    policed: set[IPAddress] = field(default_factory=set)
    sets: dict[str, frozenset[IPAddress]] = field(default_factory=dict)  # peer set -> members
    selves: set[tuple[IPAddress, IPAddress]] = field(default_factory=set)  # policy-self


def _id(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


@functools.lru_cache(maxsize=8192)  # asked per object of the table on every pod's change
def pod_id(key: PodKey) -> str:
    """Names must stay short (nftables caps them) and a pod key may not: a hash of it."""
    return _id(f"{key.namespace}/{key.name}", 16)


def chain_name(key: PodKey, direction: Dir) -> str:
    return f"{PREFIX}pod-{pod_id(key)}-{_SHORT[direction]}"


def allow_counter(key: PodKey, direction: Dir, policy: str) -> str:
    return f"{PREFIX}allow-{pod_id(key)}-{_SHORT[direction]}-{_id(policy, 12)}"


def drop_counter(key: PodKey, direction: Dir) -> str:
    return f"{PREFIX}drop-{pod_id(key)}-{_SHORT[direction]}"


def owned_by(key: PodKey, name: str) -> bool:
    """Is this chain or counter one of the pod's?"""
    return name.startswith(_owned_prefixes(key))


@functools.lru_cache(maxsize=8192)
def _owned_prefixes(key: PodKey) -> tuple[str, str, str]:
    tag = pod_id(key)
    return f"{PREFIX}pod-{tag}-", f"{PREFIX}allow-{tag}-", f"{PREFIX}drop-{tag}-"


def map_name(direction: Dir, version: int) -> str:
    return f"{PREFIX}{direction}{version}"


def set_name(version: int) -> str:
    return f"{PREFIX}pods{version}"


def self_set_name(version: int) -> str:
    return f"{PREFIX}self{version}"


PEER_SET = f"{PREFIX}peer-"


def peer_set_name(name: str, version: int) -> str:
    """The nftables set of one selector's members (a policy.PeerSet) of one IP version."""
    return f"{PEER_SET}{name}-{version}"


def peer_set_version(name: str) -> int:
    return 4 if name.endswith("-4") else 6


def l3proto(version: int) -> str:
    return "ip" if version == 4 else "ip6"


def addr_type(version: int) -> str:
    return "ipv4_addr" if version == 4 else "ipv6_addr"


def _elem(net: IPNetwork) -> object:
    if net.prefixlen == net.max_prefixlen:
        return str(net.network_address)
    return {"prefix": {"addr": str(net.network_address), "len": net.prefixlen}}


def match_expr(left: dict[str, Any], right: object, op: str = "==") -> dict[str, Any]:
    return {"match": {"op": op, "left": left, "right": right}}


def payload(protocol: str, name: str) -> dict[str, Any]:
    return {"payload": {"protocol": protocol, "field": name}}


def _ports(ports: PortSet) -> list[Expr]:
    """The port matches of a rule, one per protocol ([[]]: all traffic)."""
    if ports is None:
        return [[]]
    by_proto: dict[str, list[object]] = {}
    for r in ports:
        proto = r.protocol.lower()
        if (r.first, r.last) == (0, 65535):
            by_proto[proto] = []  # every port: the protocol alone
        elif by_proto.get(proto, [None]) != []:
            by_proto.setdefault(proto, []).append(
                r.first if r.first == r.last else {"range": [r.first, r.last]})
    out: list[Expr] = []
    for proto, numbers in by_proto.items():
        if not numbers:
            out.append([match_expr({"meta": {"key": "l4proto"}}, proto)])
        else:
            out.append([match_expr(payload(proto, "dport"), {"set": numbers})])
    return out


# per rule: its policies, its ports, and per IP version what its peers' match compares with
_Matches = list[tuple[tuple[str, ...], PortSet, dict[int, list[object]]]]


def _peer_matches(spec: DirectionRules) -> _Matches:
    """What each rule's peer matches compare with: an anonymous set of CIDRs (`rules`), or,
    with the shared form, each selector's named set (`peer_sets`) and the static CIDRs. An
    empty anonymous set stands for "none of this version" (no rule)."""
    if spec.shared is None:
        return [(rule.policies, rule.ports, {v: [{"set": [_elem(n) for n in rule.peers
                                                          if n.version == v]}]
                                             for v in VERSIONS}) for rule in spec.rules]
    matches: _Matches = []
    for shared in spec.shared:
        per_version: dict[int, list[object]] = {}
        for version in VERSIONS:
            refs: list[object] = [f"@{peer_set_name(s.name, version)}" for s in shared.sets]
            static = [_elem(n) for n in shared.static if n.version == version]
            per_version[version] = [*refs, {"set": static}]
        matches.append((shared.policies, shared.ports, per_version))
    return matches


def _pod_chain(key: PodKey, rules: PodRules, direction: Dir, out: Rendered) -> None:
    spec = getattr(rules.policy, direction)
    peer = _PEER_FIELD[direction]
    body: list[Expr] = []
    exempt = set(rules.policy.node_addresses)
    for version in VERSIONS:
        mine = sorted(str(a) for a in exempt if a.version == version)
        if mine:
            body.append([match_expr(payload(l3proto(version), peer), {"set": mine}),
                         {"return": None}])
    for policies, port_set, per_version in _peer_matches(spec):
        names = [allow_counter(key, direction, p) for p in policies]
        for name, policy in zip(names, policies, strict=True):
            out.counters[name] = f"{policy} allows {key} {direction}"[:COMMENT_MAX]
        for version in VERSIONS:
            for right in per_version[version]:
                if isinstance(right, dict) and not right["set"]:
                    continue  # no static peers of this version
                for ports in _ports(port_set):
                    body.append([match_expr(payload(l3proto(version), peer), right), *ports,
                                 *({"counter": n} for n in names), {"return": None}])
    drop = drop_counter(key, direction)
    out.counters[drop] = f"{key} {direction}: isolated, nothing allowed it"[:COMMENT_MAX]
    body.append([{"counter": drop}, {"drop": None}])
    chain = chain_name(key, direction)
    out.chains[chain] = body
    for address in rules.addresses:
        out.elements[(map_name(direction, address.version), address)] = chain
        out.policed.add(address)


def render(desired: Mapping[PodKey, PodRules]) -> Rendered:
    """The objects of every pod in `desired`: a chain per isolated direction, its counters,
    the map elements that send the pod's addresses there, the peer sets its chains name."""
    return merge(render_pod(key, rules) for key, rules in sorted(desired.items()))


def render_pod(key: PodKey, rules: PodRules) -> Rendered:
    """One pod's objects (what `render` gives for it alone)."""
    out = Rendered(sets=peer_sets(rules))
    for direction in DIRECTIONS:
        if getattr(rules.policy, direction).isolated:
            _pod_chain(key, rules, direction, out)
    if out.chains:
        out.selves = {(a, b) for a in rules.addresses for b in rules.addresses
                      if a.version == b.version}
    return out


def shape(rules: PodRules) -> object:
    """What a pod's chains, counters and map elements depend on: everything but the members
    of its peer sets (a peer change leaves it equal: the pod need not be rendered again)."""
    def direction(spec: DirectionRules) -> object:
        found = shared_shape(spec)
        return spec if found is None else found
    return (rules.addresses, rules.policy.pod, rules.policy.node_addresses,
            direction(rules.policy.ingress), direction(rules.policy.egress))


def peer_sets(rules: PodRules) -> dict[str, frozenset[IPAddress]]:
    """The members of the peer sets a pod's chains name, by set (what `render_pod` puts in
    `Rendered.sets`)."""
    out: dict[str, frozenset[IPAddress]] = {}
    for spec in (rules.policy.ingress, rules.policy.egress):
        if spec.isolated and spec.shared is not None:
            for rule in spec.shared:
                for peer_set in rule.sets:
                    for version in VERSIONS:
                        out[peer_set_name(peer_set.name, version)] = peer_set.by_version[version]
    return out


def merge(parts: Iterable[Rendered]) -> Rendered:
    """Pods' objects together; a later pod's map element for an address wins. Pods of one
    compilation agree on the members of a set they both name."""
    out = Rendered()
    for part in parts:
        out.chains.update(part.chains)
        out.counters.update(part.counters)
        out.elements.update(part.elements)
        out.policed.update(part.policed)
        out.sets.update(part.sets)
        out.selves.update(part.selves)
    return out

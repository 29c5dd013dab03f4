"""What the compiler gives: per pod, per direction, whether the pod is isolated and its allow rules.

A `Rule` allows traffic from (ingress) or to (egress) any address of `peers` on any of `ports`;
a direction's rules are ORed. `ports` is None when the rule allows all traffic, every protocol
included (ICMP too): a rule that names ports but none of them can match (an unresolved named
port, an SCTP port the renderer cannot express) is no rule at all, never an allow-all, and the
type keeps the two apart so that no renderer can confuse them.

The rules are canonical, so that a renderer can diff two compilations and tests can compare them:
peers are the fewest CIDRs covering the set exactly, port ranges are merged per protocol, rules
with equal ports or equal peers are merged (exact, since rules are ORed), a rule whose traffic
another rule allows entirely is dropped (its policies move to that rule), and everything is
sorted. `policies` lists the NetworkPolicies ("namespace/name") whose rules allow some of a
rule's traffic, and together all of it (for counters and `vswitchctl policy POD`).

The same rules also come in a second form, `DirectionRules.shared`, whose shape does not depend
on which pods a selector matches today: a `SetRule` names its selector peers as `PeerSet`s (one
per distinct selector, shared by every rule of every pod that names it; its members are the
addresses the selector matches now) beside the addresses that never change with pods (ipBlocks,
"every address"). A renderer that keeps each PeerSet as a named set of its own then turns a pod
joining or leaving a selector into one element per set, with no rule rewritten.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from policy import addresses
from policy.addresses import AddressSet
from policy.model import IPAddress, IPNetwork, PodKey, Protocol

ANY_PORT = (0, 65535)


@dataclass(frozen=True, order=True)
class PortRange:
    """Ports first..last (inclusive) of one protocol; 0..65535 is every port of it."""

    protocol: Protocol
    first: int
    last: int

    def __str__(self) -> str:
        if (self.first, self.last) == ANY_PORT:
            return self.protocol
        if self.first == self.last:
            return f"{self.protocol}/{self.first}"
        return f"{self.protocol}/{self.first}-{self.last}"


PortSet = tuple[PortRange, ...] | None  # None: all traffic, every protocol


@dataclass(frozen=True)
class Rule:
    peers: tuple[IPNetwork, ...]
    ports: PortSet
    policies: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class PeerSet:
    """The pods one selector peer (podSelector and/or namespaceSelector, in its policy's
    namespace) matches now. `name` depends on the selector alone, never on its members, so
    equal selectors of any policies share one set and a change of members keeps the name."""

    name: str
    members: tuple[IPAddress, ...]  # sorted, IPv4 first

    # Equal: the same selector with the same members. Hashed by name and compared through
    # `points` (ints: C speed): two compilations' sets of thousands of members are compared on
    # every apply, and ipaddress objects hash and compare in Python.
    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PeerSet):
            return NotImplemented
        return self is other or (self.name == other.name and self.points == other.points)

    @functools.cached_property
    def points(self) -> frozenset[int]:
        """The members as points of the address line (policy.addresses.point)."""
        return frozenset(addresses.point(a) for a in self.members)

    @functools.cached_property
    def by_version(self) -> Mapping[int, frozenset[IPAddress]]:
        """The members per IP version (4 and 6), computed once: every chain naming the set
        asks again."""
        return {v: frozenset(a for a in self.members if a.version == v) for v in (4, 6)}


@dataclass(frozen=True)
class SetRule:
    """`Rule` in shared form: peers are the members of `sets` plus `static` (ipBlocks, every
    address, and the named-port targets of egress rules, which are per destination pod)."""

    sets: tuple[PeerSet, ...]
    static: tuple[IPNetwork, ...]
    ports: PortSet
    policies: tuple[str, ...]


@dataclass(frozen=True)
class DirectionRules:
    """`isolated` False: everything is allowed (no policy of this direction selects the pod)
    and `rules` is empty. True: only what a rule allows (none: nothing). `shared`: the same
    rules in shared form (None where they were built without it, as by hand in tests; a
    renderer then uses `rules`)."""

    isolated: bool
    rules: tuple[Rule, ...] = ()
    shared: tuple[SetRule, ...] | None = None


OPEN = DirectionRules(False)


@dataclass(frozen=True)
class PodPolicy:
    """A pod's rule sets. `node_addresses` (its node's, as given to the compiler) are allowed
    both ways whatever the rules say: the spec exempts the pod's node (kubelet probes). The spec
    also exempts the pod itself (hairpin through a Service); its addresses are the renderer's."""

    pod: PodKey
    node_addresses: tuple[IPAddress, ...]
    ingress: DirectionRules
    egress: DirectionRules


@dataclass(frozen=True)
class Compiled:
    pods: Mapping[PodKey, PodPolicy]
    warnings: tuple[str, ...]


def normalize_ports(ranges: Iterable[PortRange]) -> tuple[PortRange, ...]:
    out: list[PortRange] = []
    for r in sorted(ranges):
        last = out[-1] if out else None
        if last is not None and last.protocol == r.protocol and r.first <= last.last + 1:
            if r.last > last.last:
                out[-1] = PortRange(r.protocol, last.first, r.last)
        else:
            out.append(r)
    return tuple(out)


def union_ports(sets: Iterable[PortSet]) -> PortSet:
    merged: list[PortRange] = []
    for ports in sets:
        if ports is None:
            return None
        merged.extend(ports)
    return normalize_ports(merged)


def ports_subset(inner: PortSet, outer: PortSet) -> bool:
    if outer is None:
        return True
    return inner is not None and union_ports((inner, outer)) == outer


# The compiler's raw rules: (peers, ports, policy). Working form: (peers, ports, policies).
RawRule = tuple[AddressSet, PortSet, str]
_Work = tuple[AddressSet, PortSet, frozenset[str]]


# Peers of either form: an AddressSet (`canonical`), or selector sets + static addresses
# (`canonical_shared`); `unite` joins several into one.
_P = TypeVar("_P", bound=Hashable)


def _merged(rules: list[tuple[_P, PortSet, frozenset[str]]],
            unite: Callable[[list[_P]], _P]) -> list[tuple[_P, PortSet, frozenset[str]]]:
    """Rules with equal ports merged (peers united), then rules with equal peers merged
    (ports united), until nothing merges (exact: a direction's rules are ORed)."""
    while True:
        count = len(rules)
        by_ports: dict[PortSet, tuple[list[_P], set[str]]] = {}
        for peers, ports, policies in rules:
            group = by_ports.setdefault(ports, ([], set()))
            group[0].append(peers)
            group[1].update(policies)
        by_peers: dict[_P, tuple[list[PortSet], set[str]]] = {}
        for ports, (peer_list, named) in by_ports.items():
            entry = by_peers.setdefault(unite(peer_list), ([], set()))
            entry[0].append(ports)
            entry[1].update(named)
        rules = [(peers, union_ports(p), frozenset(pol)) for peers, (p, pol) in by_peers.items()]
        if len(rules) == count:
            return rules


def _drop_subsumed(rules: list[_Work]) -> list[_Work]:
    def within(a: _Work, b: _Work) -> bool:
        return a is not b and ports_subset(a[1], b[1]) and addresses.issubset(a[0], b[0])

    kept = [r for r in rules if not any(within(r, other) for other in rules)]
    policies = {id(k): set(k[2]) for k in kept}
    for r in rules:
        for k in kept:
            if within(r, k):
                policies[id(k)].update(r[2])
    return [(k[0], k[1], frozenset(policies[id(k)])) for k in kept]


def _ports_key(ports: PortSet) -> tuple[object, ...]:
    return (0,) if ports is None else (1, *((p.protocol, p.first, p.last) for p in ports))


# The compiler's raw shared rules: (sets, static peers, ports, policy).
RawSetRule = tuple[frozenset[PeerSet], AddressSet, PortSet, str]
_SharedPeers = tuple[frozenset[PeerSet], AddressSet]


def canonical_shared(raw: Iterable[RawSetRule],
                     networks: Callable[[AddressSet], tuple[IPNetwork, ...]]
                     ) -> tuple[SetRule, ...]:
    """The shared rules of a direction, merged as `canonical` merges. Unlike it, nothing
    depends on the sets' members (no subsumption, no rule dropped for an empty set): the shape
    stays while pods come and go."""
    def unite(peers: list[_SharedPeers]) -> _SharedPeers:
        return frozenset().union(*(p[0] for p in peers)), addresses.union(p[1] for p in peers)

    rules = _merged([((sets, static), ports, frozenset((policy,)))
                     for sets, static, ports, policy in raw
                     if (sets or static) and (ports is None or ports)], unite)
    out = [SetRule(tuple(sorted(sets, key=lambda s: s.name)), networks(static), ports,
                   tuple(sorted(policies))) for (sets, static), ports, policies in rules]
    out.sort(key=lambda r: (_ports_key(r.ports), [s.name for s in r.sets],
                            [(n.version, int(n.network_address), n.prefixlen) for n in r.static]))
    return tuple(out)


def shared_shape(spec: DirectionRules) -> object | None:
    """A direction's shared rules without the sets' members (None: built without a shared
    form): equal before and after a peer change, so what depends on it alone stays."""
    if spec.shared is None:
        return None
    return spec.isolated, tuple((tuple(s.name for s in r.sets), r.static, r.ports, r.policies)
                                for r in spec.shared)


def canonical(raw: Iterable[RawRule],
              networks: Callable[[AddressSet], tuple[IPNetwork, ...]]) -> tuple[Rule, ...]:
    """The canonical rules of a direction from its raw rules (a set: order is irrelevant)."""
    rules = _drop_subsumed(_merged([(peers, ports, frozenset((policy,)))
                                    for peers, ports, policy in raw
                                    if peers and (ports is None or ports)], addresses.union))
    rules.sort(key=lambda r: (_ports_key(r[1]), r[0]))
    return tuple(Rule(networks(peers), ports, tuple(sorted(policies)))
                 for peers, ports, policies in rules)

"""Would the installed rules let this connection start now? Pure: the conntrack sweep asks it of
each tracked connection of a pod whose rules changed, and deletes those it denies. `widens`
tells the changes that cannot deny anything (a peer more, a port more), which need no sweep.

It reads the same `PodRules` the chains are rendered from, with the same meaning (render.py):
the source pod's egress, then the destination pod's ingress; a direction not isolated allows
everything; the node's addresses and the pod's own are always allowed; then any rule whose peers
hold the other end and whose ports hold the destination port (None: all traffic).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agent.linux.nftpolicy.render import PodRules
from policy import DirectionRules, PodKey, PortRange, Rule
from policy.addresses import (
    AddressSet,
    address,
    issubset,
    of_addresses,
    of_network,
    union,
)
from policy.model import IPAddress, IPNetwork
from policy.rules import PeerSet, shared_shape

PROTOCOLS = {6: "TCP", 17: "UDP", 132: "SCTP"}


@dataclass(frozen=True)
class Flow:
    """A connection as the forward hook sees it: after DNAT (`dst` is the backend), before
    masquerade (`src` is the client). `port` is the destination port (None: no ports)."""

    proto: int
    src: IPAddress
    dst: IPAddress
    port: int | None


def _allows(spec: DirectionRules, rules: PodRules, peer: IPAddress, flow: Flow) -> bool:
    if not spec.isolated or peer in rules.policy.node_addresses or peer in rules.addresses:
        return True
    name = PROTOCOLS.get(flow.proto)
    for rule in spec.rules:
        if not any(peer in net for net in rule.peers):
            continue
        if rule.ports is None:
            return True
        if name is not None and flow.port is not None and any(
                r.protocol == name and r.first <= flow.port <= r.last for r in rule.ports):
            return True
    return False


def owners(desired: Mapping[PodKey, PodRules]) -> dict[IPAddress, PodRules]:
    return {a: rules for rules in desired.values() for a in rules.addresses}


def allowed(by_address: Mapping[IPAddress, PodRules], flow: Flow) -> bool:
    """The verdict of the rules for a new connection `flow` (by_address: `owners(desired)`)."""
    src = by_address.get(flow.src)
    if src is not None and not _allows(src.policy.egress, src, flow.dst, flow):
        return False
    dst = by_address.get(flow.dst)
    if dst is None:
        return True
    return _allows(dst.policy.ingress, dst, flow.src, flow)


def _addresses(items: Iterable[IPAddress | IPNetwork]) -> AddressSet:
    return union(of_network(i) if isinstance(i, IPNetwork) else of_addresses((i,))
                 for i in items)


def _port_within(port: PortRange, ports: tuple[PortRange, ...]) -> bool:
    return any(p.protocol == port.protocol and p.first <= port.first and port.last <= p.last
               for p in ports)


def _rule_within(rule: Rule, rules: tuple[Rule, ...]) -> bool:
    """Does one of `rules` allow every peer and port `rule` allows?"""
    peers = _addresses(rule.peers)
    return any(issubset(peers, _addresses(other.peers))
               and (other.ports is None or (rule.ports is not None and all(
                   _port_within(port, other.ports) for port in rule.ports)))
               for other in rules)


def widens(old: PodRules, new: PodRules) -> bool:
    """Does `new` allow every connection `old` allowed (so that replacing `old` by `new` cuts
    none, and no conntrack sweep is needed)? Exact where it says yes; a no may be cautious
    (a rule covered only by several new rules together)."""
    if set(old.addresses) != set(new.addresses) or \
            not set(old.policy.node_addresses) <= set(new.policy.node_addresses):
        return False
    for before, after in ((old.policy.ingress, new.policy.ingress),
                          (old.policy.egress, new.policy.egress)):
        if not after.isolated:
            continue
        if not before.isolated:
            return False
        grew = _members_grew(before, after)
        if grew is None:
            grew = all(_rule_within(r, after.rules) for r in before.rules)
        if not grew:
            return False
    return True


def _members_grew(before: DirectionRules, after: DirectionRules) -> bool | None:
    """With shared rules of one shape (a peer change, the common one): whether every set's
    members are a superset of what they were, checked without address arithmetic (a set that
    lost one says no, cautiously: another rule may still allow it). None: of other shapes."""
    pairs = _set_pairs(before, after)
    return None if pairs is None else all(a.points <= b.points for a, b in pairs)


def _set_pairs(before: DirectionRules, after: DirectionRules
               ) -> list[tuple[PeerSet, PeerSet]] | None:
    """Each set of `before`'s shared rules beside the same set in `after`'s, when the two
    differ in members only (None: in more, or without a shared form)."""
    shape = shared_shape(before)
    if shape is None or shape != shared_shape(after):
        return None
    assert before.shared is not None and after.shared is not None
    return [pair for old, new in zip(before.shared, after.shared, strict=True)
            for pair in zip(old.sets, new.sets, strict=True)]


def to_sweep(old: PodRules | None, new: PodRules) -> tuple[IPAddress, ...]:
    """The addresses whose tracked connections a change of a pod's rules from `old` to `new`
    may deny: none when `new` allows all `old` did; only the peers that left its sets when
    nothing else changed (a connection it now denies has one of them at its other end); else
    the pod's own (all its connections are judged again). A pod that had no addresses (its
    chains made before its ADD) had no connections."""
    if old is not None and not old.addresses:
        return ()
    if old is None or not widens(old, new):
        left = None if old is None else _left_sets(old, new)
        return new.addresses if left is None else tuple(left)
    return ()


def _left_sets(old: PodRules, new: PodRules) -> set[IPAddress] | None:
    """The members that left the sets of `old`'s shared rules, when the rules differ in
    members only (None: in more)."""
    if (old.addresses, old.policy.node_addresses) != \
            (new.addresses, new.policy.node_addresses):
        return None
    left: set[IPAddress] = set()
    for before, after in ((old.policy.ingress, new.policy.ingress),
                          (old.policy.egress, new.policy.egress)):
        if before.isolated != after.isolated:
            return None
        if not before.isolated:
            continue
        pairs = _set_pairs(before, after)
        if pairs is None:
            return None
        for a, b in pairs:
            if a is b:
                continue
            # on points (ints, C speed): an apply asks this of every pod naming the set
            left.update(map(address, a.points - b.points))
    return left

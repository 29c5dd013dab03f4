"""Compiled NetworkPolicy -> nftables JSON commands: pure, no I/O (the unit tests run it as is).

The objects, all named `policy-...` in the agent's table (NAT's objects have other names):

    chain policy-forward   type filter hook forward priority filter; policy accept
        ct state established,related accept
        ct state new, TCP without a lone SYN, from or to a policed pod: drop
        ip saddr vmap @policy-egress4      ip6 saddr vmap @policy-egress6
        ip daddr vmap @policy-ingress4     ip6 daddr vmap @policy-ingress6
    map policy-{egress,ingress}{4,6}   pod address : jump policy-pod-<id>-{out,in}
    set policy-pods{4,6}               the addresses of the pods with an isolated direction
    set policy-peer-<sel>-{4,6}        the pods one selector matches (<sel>: its PeerSet name),
                                       shared by every chain whose rules name that selector
    chain policy-pod-<id>-in|out       one per isolated direction of a pod:
        peer in node addresses + the pod's own: return
        per rule, per IP version, per protocol: peer in @policy-peer-... (one rule per set)
            or in {ipBlock CIDRs}, ports, counters: return
        counter policy-drop-<id>-<dir>; drop
    counter policy-allow-<id>-<dir>-<policy id>   per pod, direction and allowing policy

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

import hashlib
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from policy import DirectionRules, PodKey, PodPolicy
from policy.model import IPAddress, IPNetwork
from policy.rules import PortSet

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
_POD_FIELD = {"ingress": "daddr", "egress": "saddr"}
COMMENT_MAX = 128  # nftables' limit on a comment


@dataclass(frozen=True)
class PodRules:
    """What a pod gets: its compiled policy and its own addresses (which the spec exempts)."""

    policy: PodPolicy
    addresses: tuple[IPAddress, ...]
    # Sources allowed in (never out) besides the node's: other nodes' IPs with the VPP
    # dataplane, whose Service connections arrive masqueraded to them after their own node's
    # rules judged them with the client pod's address (agent/linux/hostnat's return path);
    # the VXLAN range too when Linux carries the mesh (the masquerade then picks the VXLAN
    # device's address).
    judged: tuple[IPAddress | IPNetwork, ...] = ()


@dataclass
class Rendered:
    """A set of pods' objects, by name (the unit of diffing)."""

    chains: dict[str, list[Expr]] = field(default_factory=dict)
    counters: dict[str, str] = field(default_factory=dict)  # name -> comment
    elements: dict[tuple[str, IPAddress], str] = field(default_factory=dict)  # (map, a) -> chain
    policed: set[IPAddress] = field(default_factory=set)
    sets: dict[str, frozenset[IPAddress]] = field(default_factory=dict)  # peer set -> members


def _id(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


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
    tag = pod_id(key)
    return name.startswith((f"{PREFIX}pod-{tag}-", f"{PREFIX}allow-{tag}-",
                            f"{PREFIX}drop-{tag}-"))


def map_name(direction: Dir, version: int) -> str:
    return f"{PREFIX}{direction}{version}"


def set_name(version: int) -> str:
    return f"{PREFIX}pods{version}"


PEER_SET = f"{PREFIX}peer-"


def peer_set_name(name: str, version: int) -> str:
    """The nftables set of one selector's members (a policy.PeerSet) of one IP version."""
    return f"{PEER_SET}{name}-{version}"


def _peer_set_version(name: str) -> int:
    return 4 if name.endswith("-4") else 6


def _proto(version: int) -> str:
    return "ip" if version == 4 else "ip6"


def _addr_type(version: int) -> str:
    return "ipv4_addr" if version == 4 else "ipv6_addr"


def _elem(net: IPNetwork) -> object:
    if net.prefixlen == net.max_prefixlen:
        return str(net.network_address)
    return {"prefix": {"addr": str(net.network_address), "len": net.prefixlen}}


def _match(left: dict[str, Any], right: object, op: str = "==") -> dict[str, Any]:
    return {"match": {"op": op, "left": left, "right": right}}


def _payload(protocol: str, name: str) -> dict[str, Any]:
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
            out.append([_match({"meta": {"key": "l4proto"}}, proto)])
        else:
            out.append([_match(_payload(proto, "dport"), {"set": numbers})])
    return out


# per rule: its policies, its ports, and per IP version what its peers' match compares with
_Matches = list[tuple[tuple[str, ...], PortSet, dict[int, list[object]]]]


def _peer_matches(spec: DirectionRules, out: Rendered) -> _Matches:
    """What each rule's peer matches compare with: an anonymous set of CIDRs (`rules`), or,
    with the shared form, each selector's named set (added to `out.sets`) and the static
    CIDRs. An empty anonymous set stands for "none of this version" (no rule)."""
    if spec.shared is None:
        return [(rule.policies, rule.ports, {v: [{"set": [_elem(n) for n in rule.peers
                                                          if n.version == v]}]
                                             for v in VERSIONS}) for rule in spec.rules]
    matches: _Matches = []
    for shared in spec.shared:
        per_version: dict[int, list[object]] = {}
        for version in VERSIONS:
            refs: list[object] = []
            for peer_set in shared.sets:
                name = peer_set_name(peer_set.name, version)
                out.sets[name] = frozenset(a for a in peer_set.members if a.version == version)
                refs.append(f"@{name}")
            static = [_elem(n) for n in shared.static if n.version == version]
            per_version[version] = [*refs, {"set": static}]
        matches.append((shared.policies, shared.ports, per_version))
    return matches


def _pod_chain(key: PodKey, rules: PodRules, direction: Dir, out: Rendered) -> None:
    spec = getattr(rules.policy, direction)
    peer = _PEER_FIELD[direction]
    body: list[Expr] = []
    judged = rules.judged if direction == "ingress" else ()
    wide = [j for j in judged if isinstance(j, IPNetwork)]
    exempt = {*rules.policy.node_addresses, *rules.addresses,
              *(j for j in judged if not isinstance(j, IPNetwork))}
    for version in VERSIONS:
        nets = list(ipaddress.collapse_addresses(  # type: ignore[type-var]
            n for n in wide if n.version == version))
        mine: list[object] = [*sorted(str(a) for a in exempt if a.version == version
                                      and not any(a in n for n in nets)),
                              *(_elem(n) for n in nets)]
        if mine:
            body.append([_match(_payload(_proto(version), peer), {"set": mine}),
                         {"return": None}])
    for policies, port_set, per_version in _peer_matches(spec, out):
        names = [allow_counter(key, direction, p) for p in policies]
        for name, policy in zip(names, policies, strict=True):
            out.counters[name] = f"{policy} allows {key} {direction}"[:COMMENT_MAX]
        for version in VERSIONS:
            for right in per_version[version]:
                if isinstance(right, dict) and not right["set"]:
                    continue  # no static peers of this version
                for ports in _ports(port_set):
                    body.append([_match(_payload(_proto(version), peer), right), *ports,
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
    the map elements that send the pod's addresses there."""
    out = Rendered()
    for key, rules in sorted(desired.items()):
        for direction in DIRECTIONS:
            if getattr(rules.policy, direction).isolated:
                _pod_chain(key, rules, direction, out)
    return out


# --- transactions ----------------------------------------------------------------------------

def _obj(table: str, name: str, **extra: Any) -> dict[str, Any]:
    return {"family": "inet", "table": table, "name": name, **extra}


def _base_chain(table: str) -> dict[str, Any]:
    return _obj(table, BASE, type="filter", hook="forward", prio=0, policy="accept")


def _containers(table: str) -> list[tuple[str, dict[str, Any]]]:
    """The maps and sets of the base chain, as (kind, body) for add / flush."""
    out: list[tuple[str, dict[str, Any]]] = []
    for version in VERSIONS:
        for direction in DIRECTIONS:
            out.append(("map", _obj(table, map_name(direction, version),
                                    type=_addr_type(version), map="verdict")))
        out.append(("set", _obj(table, set_name(version), type=_addr_type(version))))
    return out


def _base_rules(table: str) -> list[Cmd]:
    def rule(expr: Expr) -> Cmd:
        return {"add": {"rule": {"family": "inet", "table": table, "chain": BASE, "expr": expr}}}

    new = _match({"ct": {"key": "state"}}, "new", "in")
    no_syn = _match({"&": [_payload("tcp", "flags"), ["fin", "syn", "rst", "ack"]]}, "syn", "!=")
    cmds = [rule([_match({"ct": {"key": "state"}}, ["established", "related"], "in"),
                  {"accept": None}])]
    for version in VERSIONS:
        for end in ("saddr", "daddr"):
            cmds.append(rule([new, no_syn, _match(_payload(_proto(version), end),
                                                  f"@{set_name(version)}"), {"drop": None}]))
    for direction in ("egress", "ingress"):  # the source's egress first, then the destination
        for version in VERSIONS:
            key = _payload(_proto(version), _POD_FIELD[direction])
            cmds.append(rule([{"vmap": {"key": key, "data": f"@{map_name(direction, version)}"}}]))
    return cmds


def base(table: str) -> list[Cmd]:
    """Creates what is missing of the table and the base objects, and rewrites the base chain's
    rules (flush + add in the same transaction: no packet sees it empty)."""
    cmds: list[Cmd] = [{"add": {"table": {"family": "inet", "name": table}}},
                       {"add": {"chain": _base_chain(table)}}]
    cmds += [{"add": {kind: body}} for kind, body in _containers(table)]
    cmds.append({"flush": {"chain": _base_chain(table)}})
    return cmds + _base_rules(table)


def _peer_set_cmds(table: str, new: Mapping[str, frozenset[IPAddress]],
                   now: Mapping[str, frozenset[IPAddress]] | None) -> list[Cmd]:
    """The peer sets `new` made to hold exactly their members: with `now` (what they hold),
    the elements that differ, and `add set` for the missing ones only; without, each set
    added, flushed and filled (whatever it held)."""
    cmds: list[Cmd] = []
    for name, members in sorted(new.items()):
        body = _obj(table, name, type=_addr_type(_peer_set_version(name)))
        had = None if now is None else now.get(name)
        if had is None:
            cmds.append({"add": {"set": body}})
            if now is None:
                cmds.append({"flush": {"set": body}})
            had = frozenset()
        for op, which in (("delete", had - members), ("add", members - had)):
            if which:
                cmds.append({op: {"element": _obj(table, name,
                                                  elem=sorted(str(a) for a in which))}})
    return cmds


def _set_deletions(table: str, names: Iterable[str]) -> list[Cmd]:
    return [{"delete": {"set": _obj(table, n)}} for n in sorted(names)]


def _chain_cmds(table: str, name: str, body: list[Expr], now: Installed | None = None
                ) -> list[Cmd]:
    """A chain's rules replaced (flush + add: atomic in the transaction). With `now` (what is
    installed): nothing when the chain holds `body` already, and no `add chain` when it exists
    (that costs libnftables a read of every chain)."""
    if now is not None and name in now.chains and now.bodies.get(name) == body:
        return []
    chain = _obj(table, name)
    cmds: list[Cmd] = [{"flush": {"chain": chain}}]
    if now is None or name not in now.chains:
        cmds.insert(0, {"add": {"chain": chain}})
    for expr in body:
        cmds.append({"add": {"rule": {"family": "inet", "table": table, "chain": name,
                                      "expr": expr}}})
    return cmds


def _element_cmds(op: str, table: str, elements: Iterable[tuple[tuple[str, IPAddress], str]],
                  policed: Iterable[IPAddress]) -> list[Cmd]:
    by_map: dict[str, list[object]] = {}
    for (mapname, address), chain in sorted(elements, key=lambda e: (e[0][0], str(e[0][1]))):
        elem: object = str(address) if op == "delete" else \
            [str(address), {"jump": {"target": chain}}]
        by_map.setdefault(mapname, []).append(elem)
    by_set: dict[str, list[object]] = {}
    for address in sorted(policed, key=str):
        by_set.setdefault(set_name(address.version), []).append(str(address))
    return [{op: {"element": _obj(table, name, elem=elems)}}
            for name, elems in (*sorted(by_map.items()), *sorted(by_set.items()))]


@dataclass
class Installed:
    """The policy's objects in the kernel, by name (what a transaction must replace), and the
    rules of the chains this process wrote (`bodies`; a chain read from the kernel has none
    here: its rules are unknown, so a change rewrites it)."""

    chains: set[str] = field(default_factory=set)
    counters: set[str] = field(default_factory=set)
    elements: dict[tuple[str, IPAddress], str] = field(default_factory=dict)
    policed: set[IPAddress] = field(default_factory=set)
    bodies: dict[str, list[Expr]] = field(default_factory=dict)
    sets: dict[str, frozenset[IPAddress]] = field(default_factory=dict)  # peer set -> members


def installed(new: Rendered) -> Installed:
    return Installed(set(new.chains), set(new.counters), dict(new.elements), set(new.policed),
                     dict(new.chains), dict(new.sets))


def full(table: str, now: Installed, new: Rendered) -> list[Cmd]:
    """One transaction that makes the policy's objects exactly `new` (then `installed(new)`),
    whatever `now` holds."""
    cmds = base(table)
    cmds += [{"flush": {kind: body}} for kind, body in _containers(table)]
    # after the flush no map element refers to a chain: stale ones can go
    cmds += [{"delete": {"chain": _obj(table, c)}} for c in sorted(now.chains - set(new.chains))]
    cmds += [{"add": {"counter": _obj(table, n, comment=c)}}
             for n, c in sorted(new.counters.items())]
    cmds += _peer_set_cmds(table, new.sets, None)
    for name, body in sorted(new.chains.items()):
        cmds += _chain_cmds(table, name, body)
    cmds += _element_cmds("add", table, new.elements.items(), new.policed)
    # last: the rules that counted into them or matched them are gone by now
    cmds += _set_deletions(table, set(now.sets) - set(new.sets))
    cmds += [{"delete": {"counter": _obj(table, n)}}
             for n in sorted(now.counters - set(new.counters))]
    return cmds


def changes(table: str, now: Installed, new: Rendered, *, with_base: bool = True) -> list[Cmd]:
    """One transaction from `now` to exactly `new` that touches only what differs: chains
    whose rules changed (or are unknown), map and set elements that changed, objects gone.
    Right only when `now` is what the kernel holds; `full` is the one that repairs."""
    cmds = base(table) if with_base else []
    cmds += [{"add": {"counter": _obj(table, n, comment=c)}}
             for n, c in sorted(new.counters.items()) if n not in now.counters]
    cmds += _peer_set_cmds(table, new.sets, now.sets)  # a peer change: elements only
    for name, body in sorted(new.chains.items()):
        cmds += _chain_cmds(table, name, body, now)
    stale = {e: c for e, c in now.elements.items() if new.elements.get(e) != c}
    cmds += _element_cmds("delete", table, stale.items(), now.policed - new.policed)
    fresh = {e: c for e, c in new.elements.items() if now.elements.get(e) != c}
    cmds += _element_cmds("add", table, fresh.items(), new.policed - now.policed)
    # after the elements: nothing refers to these chains, then no rule to these sets and counters
    cmds += [{"delete": {"chain": _obj(table, c)}} for c in sorted(now.chains - set(new.chains))]
    cmds += _set_deletions(table, set(now.sets) - set(new.sets))
    cmds += [{"delete": {"counter": _obj(table, n)}}
             for n in sorted(now.counters - set(new.counters))]
    return cmds


def pod(table: str, key: PodKey, addresses: Iterable[IPAddress], now: Installed,
        new: Rendered, *, with_base: bool = True) -> tuple[list[Cmd], Installed]:
    """One transaction that makes one pod's objects exactly `new` (its render alone; empty:
    the pod goes or is isolated in no direction), touching no other pod's objects except the
    map elements of the pod's `addresses` (one another pod held before: the new owner wins)
    and the members of the peer sets its rules name (made what its compilation says, which is
    no older than the last full one). A set no chain names any more stays until the next
    full apply. `with_base` False: the base objects are known to be in place, and left alone."""
    cmds = base(table) if with_base else []
    claimed = set(addresses)
    stale = {e: c for e, c in now.elements.items() if e[1] in claimed or owned_by(key, c)}
    unpoliced = (now.policed & ({a for (_, a) in stale} | claimed)) - new.policed
    cmds += _element_cmds("delete", table, stale.items(), unpoliced)
    mine_chains = {c for c in now.chains if owned_by(key, c)}
    mine_counters = {c for c in now.counters if owned_by(key, c)}
    # after the elements: nothing refers to these chains any more
    cmds += [{"delete": {"chain": _obj(table, c)}}
             for c in sorted(mine_chains - set(new.chains))]
    cmds += [{"add": {"counter": _obj(table, n, comment=c)}}
             for n, c in sorted(new.counters.items())]
    cmds += _peer_set_cmds(table, new.sets, now.sets)
    for name, body in sorted(new.chains.items()):
        cmds += _chain_cmds(table, name, body, now)
    cmds += _element_cmds("add", table, new.elements.items(), new.policed - now.policed)
    cmds += [{"delete": {"counter": _obj(table, n)}}
             for n in sorted(mine_counters - set(new.counters))]
    after = Installed((now.chains - mine_chains) | set(new.chains),
                      (now.counters - mine_counters) | set(new.counters),
                      {e: c for e, c in now.elements.items() if e not in stale} | new.elements,
                      (now.policed - unpoliced) | new.policed,
                      {c: b for c, b in now.bodies.items() if c not in mine_chains}
                      | new.chains, now.sets | new.sets)
    return cmds, after


def removal(table: str, now: Installed) -> list[Cmd]:
    """One transaction that deletes every object of the policy (add first: absent is fine)."""
    cmds: list[Cmd] = [{"add": {"table": {"family": "inet", "name": table}}},
                       {"add": {"chain": _base_chain(table)}},
                       {"delete": {"chain": _base_chain(table)}}]
    for kind, body in _containers(table):
        cmds += [{"add": {kind: body}}, {"delete": {kind: body}}]
    cmds += [{"delete": {"chain": _obj(table, c)}} for c in sorted(now.chains)]
    cmds += _set_deletions(table, now.sets)
    cmds += [{"delete": {"counter": _obj(table, n)}} for n in sorted(now.counters)]
    return cmds

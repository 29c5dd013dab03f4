"""Rendered NetworkPolicy objects -> nftables transactions: pure, no I/O (the unit tests run
it as is). Each function gives the commands of one libnftables transaction, all or nothing:

    base(table)                        the table, the base chain, maps and sets (what is missing)
    full(table, now, new)              everything made exactly `new`, whatever `now` holds
    changes(table, now, new)           from `now` to `new`, touching only what differs
    pod(table, key, addresses, now, new)   one pod's objects (and the peer sets its rules name)
    removal(table, now)                every object of the policy deleted

`Installed` is what is in the kernel (by name), `installed(new)` what a transaction left there.
The order inside a transaction matters: what a rule names (a set, a chain, a counter) exists
before the rule and goes after it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.linux.nftpolicy.render import (
    BASE,
    DIRECTIONS,
    POD_FIELD,
    VERSIONS,
    Cmd,
    Expr,
    Rendered,
    addr_type,
    l3proto,
    map_name,
    match_expr,
    owned_by,
    payload,
    peer_set_version,
    self_set_name,
    set_name,
)
from policy import PodKey
from policy.model import IPAddress


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
                                    type=addr_type(version), map="verdict")))
        out.append(("set", _obj(table, set_name(version), type=addr_type(version))))
        out.append(("set", _obj(table, self_set_name(version),
                                type=[addr_type(version), addr_type(version)])))
    return out


def digest(expr: Expr) -> str:
    """The comment each rule is written with: a digest of its expression, which a check
    reads back (verify.py): a rule replaced by hand loses it."""
    return "vswitch-cni " + hashlib.sha256(json.dumps(expr, sort_keys=True).encode()
                                           ).hexdigest()[:16]


def _rule(table: str, chain: str, expr: Expr) -> Cmd:
    return {"add": {"rule": {"family": "inet", "table": table, "chain": chain, "expr": expr,
                             "comment": digest(expr)}}}


def base_bodies() -> list[Expr]:
    """The base chain's rules, as `base` writes them."""
    return [c["add"]["rule"]["expr"] for c in _base_rules("")]


def _base_rules(table: str) -> list[Cmd]:
    def rule(expr: Expr) -> Cmd:
        return _rule(table, BASE, expr)

    new = match_expr({"ct": {"key": "state"}}, "new", "in")
    no_syn = match_expr({"&": [payload("tcp", "flags"), ["fin", "syn", "rst", "ack"]]}, "syn", "!=")
    cmds = [rule([match_expr({"ct": {"key": "state"}}, ["established", "related"], "in"),
                  {"accept": None}])]
    for version in VERSIONS:
        for end in ("saddr", "daddr"):
            cmds.append(rule([new, no_syn, match_expr(payload(l3proto(version), end),
                                                      f"@{set_name(version)}"), {"drop": None}]))
    for version in VERSIONS:  # a pod to itself: exempt (after the no-SYN check, as any pod)
        ends = [payload(l3proto(version), end) for end in ("saddr", "daddr")]
        cmds.append(rule([match_expr({"concat": ends}, f"@{self_set_name(version)}"),
                          {"accept": None}]))
    for direction in ("egress", "ingress"):  # the source's egress first, then the destination
        for version in VERSIONS:
            key = payload(l3proto(version), POD_FIELD[direction])
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
        body = _obj(table, name, type=addr_type(peer_set_version(name)))
        had = None if now is None else now.get(name)
        if had is members:  # the compiler's same set (its members cached): nothing changed
            continue
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
        cmds.append(_rule(table, name, expr))
    return cmds


def _element_cmds(op: str, table: str, elements: Iterable[tuple[tuple[str, IPAddress], str]],
                  policed: Iterable[IPAddress],
                  selves: Iterable[tuple[IPAddress, IPAddress]] = ()) -> list[Cmd]:
    by_map: dict[str, list[object]] = {}
    for (mapname, address), chain in sorted(elements, key=lambda e: (e[0][0], str(e[0][1]))):
        elem: object = str(address) if op == "delete" else \
            [str(address), {"jump": {"target": chain}}]
        by_map.setdefault(mapname, []).append(elem)
    by_set: dict[str, list[object]] = {}
    for address in sorted(policed, key=str):
        by_set.setdefault(set_name(address.version), []).append(str(address))
    for a, b in sorted(selves, key=lambda pair: (str(pair[0]), str(pair[1]))):
        by_set.setdefault(self_set_name(a.version), []).append({"concat": [str(a), str(b)]})
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
    selves: set[tuple[IPAddress, IPAddress]] = field(default_factory=set)


def installed(new: Rendered) -> Installed:
    return Installed(set(new.chains), set(new.counters), dict(new.elements), set(new.policed),
                     dict(new.chains), dict(new.sets), set(new.selves))


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
    cmds += _element_cmds("add", table, new.elements.items(), new.policed, new.selves)
    # last: the rules that counted into them or matched them are gone by now
    cmds += _set_deletions(table, set(now.sets) - set(new.sets))
    cmds += [{"delete": {"counter": _obj(table, n)}}
             for n in sorted(now.counters - set(new.counters))]
    return cmds


def changes(table: str, now: Installed, new: Rendered, *, with_base: bool = True,
            delete_counters: bool = True) -> list[Cmd]:
    """One transaction from `now` to exactly `new` that touches only what differs: chains
    whose rules changed (or are unknown), map and set elements that changed, objects gone.
    Right only when `now` is what the kernel holds; `full` is the one that repairs.
    `delete_counters`: as for `pod`."""
    cmds = base(table) if with_base else []
    cmds += [{"add": {"counter": _obj(table, n, comment=c)}}
             for n, c in sorted(new.counters.items()) if n not in now.counters]
    cmds += _peer_set_cmds(table, new.sets, now.sets)  # a peer change: elements only
    for name, body in sorted(new.chains.items()):
        cmds += _chain_cmds(table, name, body, now)
    stale = {e: c for e, c in now.elements.items() if new.elements.get(e) != c}
    cmds += _element_cmds("delete", table, stale.items(), now.policed - new.policed,
                          now.selves - new.selves)
    fresh = {e: c for e, c in new.elements.items() if now.elements.get(e) != c}
    cmds += _element_cmds("add", table, fresh.items(), new.policed - now.policed,
                          new.selves - now.selves)
    # after the elements: nothing refers to these chains, then no rule to these sets and counters
    cmds += [{"delete": {"chain": _obj(table, c)}} for c in sorted(now.chains - set(new.chains))]
    cmds += _set_deletions(table, set(now.sets) - set(new.sets))
    if delete_counters:
        cmds += [{"delete": {"counter": _obj(table, n)}}
                 for n in sorted(now.counters - set(new.counters))]
    return cmds


def pod(table: str, key: PodKey, addresses: Iterable[IPAddress], now: Installed,
        new: Rendered, *, with_base: bool = True, delete_counters: bool = True
        ) -> tuple[list[Cmd], Installed]:
    """One transaction that makes one pod's objects exactly `new` (its render alone; empty:
    the pod goes or is isolated in no direction), touching no other pod's objects except the
    map elements of the pod's `addresses` (one another pod held before: the new owner wins)
    and the members of the peer sets its rules name (made what its compilation says, which is
    no older than the last full one). A set no chain names any more stays until the next
    full apply. `with_base` False: the base objects are known to be in place, and left alone.
    `delete_counters` False: the counters no longer wanted stay in the kernel (the caller
    deletes them later, after reading their values); `Installed` forgets them either way."""
    cmds = base(table) if with_base else []
    claimed = set(addresses)
    stale = {e: c for e, c in now.elements.items() if e[1] in claimed or owned_by(key, c)}
    touched = {a for (_, a) in stale} | claimed
    unpoliced = (now.policed & touched) - new.policed
    unselfed = {p for p in now.selves if p[0] in touched or p[1] in touched} - new.selves
    cmds += _element_cmds("delete", table, stale.items(), unpoliced, unselfed)
    mine_chains = {c for c in now.chains if owned_by(key, c)}
    mine_counters = {c for c in now.counters if owned_by(key, c)}
    # after the elements: nothing refers to these chains any more
    cmds += [{"delete": {"chain": _obj(table, c)}}
             for c in sorted(mine_chains - set(new.chains))]
    # a counter in place already (the pod's chains made before its ADD) keeps its count
    cmds += [{"add": {"counter": _obj(table, n, comment=c)}}
             for n, c in sorted(new.counters.items()) if n not in now.counters]
    cmds += _peer_set_cmds(table, new.sets, now.sets)
    for name, body in sorted(new.chains.items()):
        cmds += _chain_cmds(table, name, body, now)
    selves = now.selves - unselfed
    cmds += _element_cmds("add", table, new.elements.items(), new.policed - now.policed,
                          new.selves - selves)
    if delete_counters:
        cmds += [{"delete": {"counter": _obj(table, n)}}
                 for n in sorted(mine_counters - set(new.counters))]
    after = Installed((now.chains - mine_chains) | set(new.chains),
                      (now.counters - mine_counters) | set(new.counters),
                      {e: c for e, c in now.elements.items() if e not in stale} | new.elements,
                      (now.policed - unpoliced) | new.policed,
                      {c: b for c, b in now.bodies.items() if c not in mine_chains}
                      | new.chains, now.sets | new.sets, selves | new.selves)
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


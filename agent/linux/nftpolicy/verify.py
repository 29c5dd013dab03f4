"""The policy's objects as the kernel holds them, read back, and whether they drifted from what
the renderer wrote. Pure: `parse` takes libnftables' JSON listing of the table, `drift` compares.

The renderer checks every `verify_every` seconds, and rewrites everything only when something
differs (issue #39: a full rewrite only repairs drift). What is compared:
- the names of the chains, counters and peer sets, and every element of the maps and sets
  (the idle allow counters, left for a later retirement, are expected too);
- per chain (the base chain too), its rules' comments, in order, against the digests of the
  rules the renderer wrote there (transactions.digest: each rule is written with the digest of
  its expression as its comment). A rule added, deleted, moved or replaced by hand (`nft
  replace rule` keeps the handle) shows another sequence; only a replacement that copies the
  comment would pass. Comparing the expressions themselves would need libnftables' listing
  form of each, which normalizes what it was given.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.linux.nftpolicy import render, transactions
from agent.linux.nftpolicy.render import DIRECTIONS
from agent.linux.nftpolicy.transactions import Installed
from agent.linux.nftpolicy.views import Count


@dataclass
class Read:
    installed: Installed = field(default_factory=Installed)  # no bodies: rules are not parsed
    values: dict[str, Count] = field(default_factory=dict)  # counter -> its value
    comments: dict[str, tuple[str, ...]] = field(default_factory=dict)  # chain -> its rules'


def parse(listed: Iterable[Mapping[str, Any]]) -> Read:
    """The policy's objects (named `policy-...`) in a listing of the agent's table."""
    out = Read()
    now = out.installed
    maps = {render.map_name(d, v) for d in DIRECTIONS for v in render.VERSIONS}
    sets = {render.set_name(v) for v in render.VERSIONS}
    selves = {render.self_set_name(v) for v in render.VERSIONS}
    comments: dict[str, list[str]] = {}
    for obj in listed:
        kind, body = next(iter(obj.items()))
        name = body.get("name", "") if isinstance(body, dict) else ""
        if kind == "rule" and body.get("chain", "").startswith(render.PREFIX):
            comments.setdefault(body["chain"], []).append(str(body.get("comment", "")))
        elif kind == "chain" and name.startswith(render.PREFIX):
            comments.setdefault(name, [])
            if name != render.BASE:
                now.chains.add(name)
        elif kind == "counter" and name.startswith(render.PREFIX):
            now.counters.add(name)
            out.values[name] = Count(body["packets"], body["bytes"])
        elif kind == "map" and name in maps:
            for address, verdict in body.get("elem", ()):
                now.elements[(name, _address(address))] = verdict["jump"]["target"]
        elif kind == "set" and name in sets:
            now.policed.update(_address(a) for a in body.get("elem", ()))
        elif kind == "set" and name in selves:
            now.selves.update((_address(a), _address(b)) for e in body.get("elem", ())
                              for a, b in [e["concat"]])
        elif kind == "set" and name.startswith(render.PEER_SET):
            # plain addresses; anything else makes the next diff fail and rewrite all
            now.sets[name] = frozenset(_address(a) for a in body.get("elem", ())
                                       if isinstance(a, str))
    out.comments = {chain: tuple(found) for chain, found in comments.items()}
    return out


def drift(read: Read, now: Installed, idle: Collection[str]) -> str | None:
    """What differs between the kernel (`read`) and what the renderer wrote (`now`, with the
    `idle` counters it left); None: nothing."""
    held = read.installed
    for what, have, wanted in (("the chains", held.chains, now.chains),
                               ("the counters", held.counters, now.counters | set(idle)),
                               ("the map elements", held.elements, now.elements),
                               ("the policed pods", held.policed, now.policed),
                               ("the pods' own pairs", held.selves, now.selves),
                               ("the peer sets", held.sets, now.sets)):
        if have != wanted:
            return what
    bodies = {render.BASE: transactions.base_bodies(), **now.bodies}
    for chain in (render.BASE, *sorted(now.chains)):
        body = bodies.get(chain)
        if body is None:
            return f"the rules of {chain} (not written by this process)"
        if read.comments.get(chain) != tuple(transactions.digest(e) for e in body):
            return f"the rules of {chain}"
    return None


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)

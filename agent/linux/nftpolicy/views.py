"""What the renderer shows of itself: counts, and a pod's installed rules (for /metrics and
`vswitchctl policy POD`). Pure: built from the pods' rules and the counters' values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent.linux.nftpolicy.render import (
    DIRECTIONS,
    Dir,
    PodRules,
    allow_counter,
    chain_name,
    drop_counter,
)
from policy import PodKey, Rule
from policy.model import IPAddress


@dataclass(frozen=True)
class Count:
    packets: int
    bytes: int

    def __add__(self, other: Count) -> Count:
        return Count(self.packets + other.packets, self.bytes + other.bytes)


@dataclass(frozen=True)
class Counters:
    """`allowed`: per policy ("ns/name"), what its rules let through on this node (a packet a
    rule of two policies allows counts for both). `dropped`: per pod and isolated direction,
    what no rule allowed: a drop is the isolation's, which no single policy owns."""

    allowed: Mapping[str, Count]
    dropped: Mapping[tuple[PodKey, Dir], Count]


@dataclass(frozen=True)
class DirectionView:
    chain: str  # the nftables chain: `nft list chain inet vswitch-cni <chain>`
    exempt: tuple[IPAddress, ...]  # always allowed: the node's addresses and the pod's own
    rules: tuple[Rule, ...]
    allowed: Mapping[str, Count]  # per policy, this pod and direction
    dropped: Count


@dataclass(frozen=True)
class PodView:
    pod: PodKey
    addresses: tuple[IPAddress, ...]
    ingress: DirectionView | None  # None: not isolated, everything allowed
    egress: DirectionView | None


# A counter's meaning: the policy it counts allows for, or the (pod, direction) it counts drops of.
Meaning = str | tuple[PodKey, Dir]


def meanings(pods: Mapping[PodKey, PodRules]) -> dict[str, Meaning]:
    """Every counter the pods' rules render, by name."""
    out: dict[str, Meaning] = {}
    for key, rules in pods.items():
        for direction in DIRECTIONS:
            spec = getattr(rules.policy, direction)
            if not spec.isolated:
                continue
            out[drop_counter(key, direction)] = (key, direction)
            for rule in spec.rules:
                for policy in rule.policies:
                    out[allow_counter(key, direction, policy)] = policy
    return out


def tally(values: Mapping[str, Count], retired: Mapping[str, Count],
          active: Mapping[str, Meaning], idle: Mapping[str, str]) -> Counters:
    """The renderer's counters: the values of the counters its pods' rules count into
    (`active`) and of the idle allow counters, per policy and per (pod, direction), with the
    `retired` counts of deleted ones added."""
    allowed_by: dict[str, Count] = dict(retired)
    dropped: dict[tuple[PodKey, Dir], Count] = {}
    for name, meaning in (*active.items(), *((n, p) for n, p in idle.items() if n not in active)):
        value = values.get(name, Count(0, 0))
        if isinstance(meaning, str):
            allowed_by[meaning] = allowed_by.get(meaning, Count(0, 0)) + value
        else:
            dropped[meaning] = value
    return Counters(allowed_by, dropped)


def pod_view(key: PodKey, rules: PodRules, values: Mapping[str, Count]) -> PodView:
    views: dict[Dir, DirectionView | None] = {}
    for direction in DIRECTIONS:
        spec = getattr(rules.policy, direction)
        if not spec.isolated:
            views[direction] = None
            continue
        policies = sorted({p for rule in spec.rules for p in rule.policies})
        views[direction] = DirectionView(
            chain_name(key, direction),
            (*rules.policy.node_addresses, *rules.addresses),
            spec.rules,
            {p: values.get(allow_counter(key, direction, p), Count(0, 0)) for p in policies},
            values.get(drop_counter(key, direction), Count(0, 0)))
    return PodView(key, rules.addresses, views["ingress"], views["egress"])

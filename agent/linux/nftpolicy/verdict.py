"""Would the installed rules let this connection start now? Pure: the conntrack sweep asks it of
each tracked connection of a pod whose rules changed, and deletes those it denies.

It reads the same `PodRules` the chains are rendered from, with the same meaning (render.py):
the source pod's egress, then the destination pod's ingress; a direction not isolated allows
everything; the node's addresses and the pod's own are always allowed; then any rule whose peers
hold the other end and whose ports hold the destination port (None: all traffic).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent.linux.nftpolicy.render import PodRules
from policy import DirectionRules, PodKey
from policy.model import IPAddress

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
    if dst is None or any(flow.src == j if isinstance(j, IPAddress) else flow.src in j
                          for j in dst.judged):  # judged by the source's own node
        return True
    return _allows(dst.policy.ingress, dst, flow.src, flow)

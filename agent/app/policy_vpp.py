"""The VPP dataplane's NetworkPolicy renderer, as the controller sees it (agent/app/kube_side):
VPP's acl plugin on each pod's interface (agent/dataplane/vpp/acl), fed per pod from the pod's
attachments, its counters summed the way the nftables renderer's are."""

from __future__ import annotations

from typing import Any

from agent.dataplane.vpp.acl import PodAcl, VppPolicy
from agent.dataplane.vpp.acl_render import DEFAULT_DENY, POLICY
from agent.dataplane.vpp.stats import StatsSegment, stats_socket
from agent.netpol.perpod import PerPod, merged_addresses
from agent.netpol.types import Counts, Enforced
from policy.model import IPAddress, IPNetwork


def vpp_renderer(dataplane: Any, api_socket: str, service_cidrs: list[IPNetwork],
                 exempt: list[IPAddress], services_in_vpp: bool = False) -> PerPod:
    """`dataplane`: the VPP driver (its API connection is shared); VPP's stats segment is read
    from the socket beside the API socket (VPP's default /run/vpp/stats.sock).
    `exempt`: this node's addresses (no other node's are).
    `services_in_vpp`: ServiceTranslation vpp (a pod's hairpin stays in VPP)."""
    stats = StatsSegment(stats_socket(api_socket))
    acls = VppPolicy(dataplane.api, service_cidrs, exempt, stats=stats,
                     self_egress=services_in_vpp)

    def merge(group: list[Enforced]) -> PodAcl | None:
        # A pod has one interface in VPP at a time: the newest attachment's (a replaced
        # sandbox's interface is being torn down).
        wired = [e for e in group if "sw_if_index" in e.wiring.get("extra", {})]
        if not wired:
            return None
        newest = wired[-1]
        return PodAcl(newest.policy, int(newest.wiring["extra"]["sw_if_index"]),
                      merged_addresses(group))

    def counters() -> Counts:
        allowed: dict[str, tuple[int, int]] = {}
        dropped: dict[Any, tuple[int, int]] = {}
        for pod, rules in acls.counters().items():
            for c in rules:
                if c.rule.reason == POLICY:
                    for name in c.rule.policies:
                        have = allowed.get(name, (0, 0))
                        allowed[name] = (have[0] + c.packets, have[1] + c.bytes)
                elif c.rule.reason == DEFAULT_DENY:
                    have = dropped.get((pod, c.direction), (0, 0))
                    dropped[(pod, c.direction)] = (have[0] + c.packets, have[1] + c.bytes)
        return Counts(allowed, dropped)

    return PerPod("vpp-acl", False, acls.apply, acls.apply_pod, acls.remove_pod, merge, counters)

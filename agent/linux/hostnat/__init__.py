"""The agent's NAT on the node: its own nftables table, rebuilt whole at every start.

Two rules, each for IPv4 and IPv6 (Contiv's `NatExternalTraffic`, and what the VPP dataplane needs
for Services):

1. **Egress** (`NatExternalTraffic`, default on): a packet from a pod to anything outside the
   cluster's own ranges (pod, service, node interconnect, VXLAN, VPP-host subnets and the
   configured `NatExcludedCIDRs`) leaves with the node's address. An upstream router has no route
   to the pod subnets; without this a pod's connection to the world never gets a reply.
2. **Service return path** (VPP dataplane only): a pod's connection that the node DNATs back into
   the pod network (kube-proxy translating a ClusterIP or NodePort to a pod) is masqueraded to
   the node's address on the way out: the interconnect's towards a pod of this node, the
   uplink's towards a pod of another node. Otherwise the backend's reply is switched pod to pod
   inside VPP (or through the VXLAN mesh straight into the client's VPP), never meets this
   node's conntrack, arrives un-translated and is reset. The cost: the backend sees the node's
   address, not the client pod's.

Everything lives in table `inet vswitch-cni`: replaced in one transaction at start (no
duplicates, no gap), left in place while the agent restarts (pods keep their egress), removed by
`remove()` when the node leaves. Other programs' tables and chains are never touched.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from typing import Any

from agent.linux.hostnat.nft import NftError, run

log = logging.getLogger(__name__)

TABLE = "vswitch-cni"
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
__all__ = ["TABLE", "NatPlan", "NftError", "apply", "remove", "rules"]


@dataclass(frozen=True)
class NatPlan:
    """What the node translates."""

    pod_nets: tuple[IPNetwork, ...]  # the cluster's pod ranges (every node's subnets)
    keep: tuple[IPNetwork, ...]  # destinations never translated (pods included)
    external: bool  # rule 1
    service_return: bool  # rule 2 (the VPP dataplane)
    table: str = TABLE

    @property
    def empty(self) -> bool:
        return not self.pod_nets or (not self.external and not self.service_return)


def _elements(nets: list[IPNetwork]) -> list[dict[str, Any]]:
    return [{"prefix": {"addr": str(n.network_address), "len": n.prefixlen}}
            for n in ipaddress.collapse_addresses(nets)]  # type: ignore[type-var]


def _sets(plan: NatPlan, version: int) -> list[dict[str, Any]]:
    family = "ipv4_addr" if version == 4 else "ipv6_addr"
    out = []
    for name, nets in ((f"pods{version}", plan.pod_nets), (f"keep{version}", plan.keep)):
        mine = [n for n in nets if n.version == version]
        out.append({"add": {"set": {
            "family": "inet", "table": plan.table, "name": name, "type": family,
            "flags": ["interval"], **({"elem": _elements(mine)} if mine else {}),
        }}})
    return out


def _match(version: int, field: str, op: str, setname: str) -> dict[str, Any]:
    proto = "ip" if version == 4 else "ip6"
    return {"match": {"op": op, "left": {"payload": {"protocol": proto, "field": field}},
                      "right": f"@{setname}{version}"}}


def _rule(plan: NatPlan, expr: list[dict[str, Any]], comment: str) -> dict[str, Any]:
    return {"add": {"rule": {"family": "inet", "table": plan.table, "chain": "postrouting",
                             "expr": [*expr, {"masquerade": None}], "comment": comment}}}


def rules(plan: NatPlan) -> list[dict[str, Any]]:
    """The nftables commands that replace the table with the plan (one transaction)."""
    table = {"family": "inet", "name": plan.table}
    cmds: list[dict[str, Any]] = [
        {"add": {"table": table}}, {"delete": {"table": table}}, {"add": {"table": table}},
        {"add": {"chain": {"family": "inet", "table": plan.table, "name": "postrouting",
                           "type": "nat", "hook": "postrouting", "prio": 100,
                           "policy": "accept"}}},
    ]
    for version in sorted({n.version for n in plan.pod_nets}):
        cmds += _sets(plan, version)
        pods = _match(version, "saddr", "==", "pods")
        if plan.service_return:
            cmds.append(_rule(plan, [
                pods, _match(version, "daddr", "==", "pods"),
                {"match": {"op": "in", "left": {"ct": {"key": "status"}}, "right": "dnat"}},
            ], "pod connections DNATed back into the pod network: replies must return here"))
        if plan.external:
            cmds.append(_rule(plan, [pods, _match(version, "daddr", "!=", "keep")],
                              "pods to outside the cluster leave with the node's address"))
    return cmds


def apply(plan: NatPlan) -> None:
    """Makes the node's table exactly `plan` (or removes it when the plan translates nothing),
    in the calling thread's network namespace. Raises NftError."""
    if plan.empty:
        remove(plan.table)
        return
    run(rules(plan))
    log.info("NAT in place: table inet %s (egress %s, service return path %s)", plan.table,
             "on" if plan.external else "off", "on" if plan.service_return else "off")


def remove(table: str = TABLE) -> bool:
    """Deletes the agent's table, nothing else; False when there was none."""
    try:
        run([{"delete": {"table": {"family": "inet", "name": table}}}])
    except NftError as exc:
        if "No such file or directory" in str(exc):
            return False
        raise
    return True

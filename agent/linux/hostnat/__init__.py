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

Everything lives in table `inet vswitch-cni`, which NAT shares with the NetworkPolicy renderer
(`agent/linux/nftpolicy`): each owner replaces only its own objects (NAT's are the chain
`postrouting` and the sets `pods4`, `keep4`, `pods6`, `keep6`), so a NAT re-apply never lifts a
pod's isolation and a policy change never stops the NAT. NAT's objects are replaced in one
transaction at start (no duplicates, no gap), left in place while the agent restarts (pods keep
their egress), and the whole table is removed by `remove()` when the node leaves. Other programs'
tables and chains are never touched.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from typing import Any

from agent.linux.nft import NftError, run, table_lock

log = logging.getLogger(__name__)

TABLE = "vswitch-cni"
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
__all__ = ["TABLE", "NatPlan", "NftError", "apply", "remove", "remove_own", "rules"]


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


CHAIN = "postrouting"
SETS = ("pods", "keep")  # per IP version: pods4, keep4, pods6, keep6


def _set(plan: NatPlan, name: str, version: int) -> dict[str, Any]:
    return {"family": "inet", "table": plan.table, "name": f"{name}{version}",
            "type": "ipv4_addr" if version == 4 else "ipv6_addr", "flags": ["interval"]}


def _chain(table: str) -> dict[str, Any]:
    return {"family": "inet", "table": table, "name": CHAIN, "type": "nat",
            "hook": "postrouting", "prio": 100, "policy": "accept"}


def _sets(plan: NatPlan, version: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name, nets in (("pods", plan.pod_nets), ("keep", plan.keep)):
        body = _set(plan, name, version)
        mine = [n for n in nets if n.version == version]
        # add (creates it when missing) + flush: its old elements go, in the same transaction
        out += [{"add": {"set": body}}, {"flush": {"set": body}}]
        if mine:
            out.append({"add": {"element": {**body, "elem": _elements(mine)}}})
    return out


def _gone(plan: NatPlan, versions: set[int]) -> list[dict[str, Any]]:
    """Deletes NAT's sets of the IP versions not in `versions` (add first: absent is fine)."""
    out: list[dict[str, Any]] = []
    for version in sorted({4, 6} - versions):
        for name in SETS:
            body = _set(plan, name, version)
            out += [{"add": {"set": body}}, {"delete": {"set": body}}]
    return out


def _match(version: int, field: str, op: str, setname: str) -> dict[str, Any]:
    proto = "ip" if version == 4 else "ip6"
    return {"match": {"op": op, "left": {"payload": {"protocol": proto, "field": field}},
                      "right": f"@{setname}{version}"}}


def _rule(plan: NatPlan, expr: list[dict[str, Any]], comment: str) -> dict[str, Any]:
    return {"add": {"rule": {"family": "inet", "table": plan.table, "chain": CHAIN,
                             "expr": [*expr, {"masquerade": None}], "comment": comment}}}


def rules(plan: NatPlan) -> list[dict[str, Any]]:
    """The nftables commands that replace NAT's objects with the plan (one transaction); the
    other objects of the table (the policy renderer's) are left as they are."""
    table = {"family": "inet", "name": plan.table}
    chain = _chain(plan.table)
    versions: set[int] = {n.version for n in plan.pod_nets}
    cmds: list[dict[str, Any]] = [
        {"add": {"table": table}}, {"add": {"chain": chain}}, {"flush": {"chain": chain}},
        *_gone(plan, versions),  # after the flush: no rule of the chain refers to them now
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
    """Makes NAT's objects in the node's table exactly `plan` (removes them when the plan
    translates nothing), in the calling thread's network namespace. Raises NftError."""
    if plan.empty:
        remove_own(plan.table)
        return
    with table_lock:
        run(rules(plan))
    log.info("NAT in place: table inet %s (egress %s, service return path %s)", plan.table,
             "on" if plan.external else "off", "on" if plan.service_return else "off")


def remove_own(table: str = TABLE) -> None:
    """Deletes NAT's objects only, and the table when nothing else is left in it."""
    plan = NatPlan((), (), external=False, service_return=False, table=table)
    chain = _chain(table)
    with table_lock:
        run([{"add": {"table": {"family": "inet", "name": table}}},
             {"add": {"chain": chain}}, {"delete": {"chain": chain}}, *_gone(plan, set())])
        listed = run([{"list": {"table": {"family": "inet", "name": table}}}])
        if not [o for o in listed.get("nftables", ()) if "metainfo" not in o and "table" not in o]:
            remove(table)


def remove(table: str = TABLE) -> bool:
    """Deletes the agent's whole table (NAT's and the policy renderer's objects: the node is
    leaving), nothing else; False when there was none."""
    try:
        run([{"delete": {"table": {"family": "inet", "name": table}}}])
    except NftError as exc:
        if "No such file or directory" in str(exc):
            return False
        raise
    return True

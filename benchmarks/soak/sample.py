"""What the soak reads off the node at every window: the agent process, the node's kernel state,
etcd and VPP; and what is left of deleted pods (the leak counts).

Counts are split into the node's whole (other users share this machine and this VPP: context)
and the soak's own (what its agent made: the figures judged). Every reader takes well under a
second with 50 pods, so sampling every window costs the churn little.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyetcd

from agent.model.errors import CniError
from testbed.agent import AgentHandle
from testbed.vpp import VppProbe

CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Owned:
    """The names and tags of the soak's pods: the live ones and every one it ever made."""

    live_links: frozenset[str]  # host ends of the live pods' veths
    dead_links: frozenset[str]  # ... of the deleted pods
    live_tags: frozenset[str]  # VPP interface tags
    dead_tags: frozenset[str]
    live_addresses: frozenset[str]
    dead_addresses: frozenset[str]  # addresses deleted pods had and no live pod has now
    pod_subnet: str


def process(pid: int) -> dict[str, float]:
    """RSS (KiB), threads, open fds and CPU seconds of a process."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = {line.split(":")[0]: line.split(":", 1)[1].split() for line in status}
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return {
        "rss_kib": float(fields["VmRSS"][0]),
        "threads": float(fields["Threads"][0]),
        "fds": float(len(os.listdir(f"/proc/{pid}/fd"))),
        "cpu_s": (int(stat[11]) + int(stat[12])) / CLK_TCK,
    }


def _json(argv: list[str]) -> Any:
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout or "[]")


def host(owned: Owned, nft_tables: Collection[str]) -> dict[str, float]:
    """The node's links, routes, nftables rules and conntrack entries: all, and the soak's."""
    shown = _json(["ip", "-j", "link", "show"])
    # The VPP driver's ready spares (its pod pool) hold names from the reused set that deleted
    # pods had: not a deleted pod's link.
    links = {str(o["ifname"]) for o in shown if o.get("ifalias") != "vswitch-cni/spare"}
    routes: list[dict[str, Any]] = []
    for family in ("-4", "-6"):
        routes += _json(["ip", "-j", family, "route", "show", "table", "all"])
    subnet_head = owned.pod_subnet.rsplit(".", 2)[0] + "."  # 10.x. of a /16 cluster range
    ruleset = _json(["nft", "-j", "list", "ruleset"])
    rules = [o["rule"] for o in ruleset["nftables"] if "rule" in o]
    conntrack = Path("/proc/sys/net/netfilter/nf_conntrack_count")
    return {
        "links_all": float(len(links)),
        "links_live_pods": float(len(links & owned.live_links)),
        "links_dead_pods": float(len(links & owned.dead_links)),
        "routes_all": float(len(routes)),
        "routes_pod_range": float(sum(str(r.get("dst", "")).startswith(subnet_head)
                                      for r in routes)),
        "routes_dead_pods": float(sum(str(r.get("dst", "")).split("/")[0] in owned.dead_addresses
                                      for r in routes)),
        "nft_rules_all": float(len(rules)),
        "nft_rules_ours": float(sum(r["table"] in nft_tables for r in rules)),
        "conntrack": float(conntrack.read_text()) if conntrack.exists() else 0.0,
    }


def etcd(endpoint: str, prefix: str) -> dict[str, float]:
    """Keys under the agent's prefix, all and per kind (pods/, ipam/, ...)."""
    url = urlparse(endpoint)
    client = pyetcd.client(url.hostname or "127.0.0.1", url.port or 2379, timeout=10)
    try:
        keys = [meta.key.decode() for _, meta in client.get_prefix(prefix, keys_only=True)]
    finally:
        client.close()
    out = {"etcd_keys": float(len(keys))}
    for kind in ("pods", "ipam"):
        out[f"etcd_{kind}"] = float(sum(k[len(prefix):].startswith(f"{kind}/") for k in keys))
    return out


def agent_views(agent: AgentHandle) -> dict[str, float]:
    """The agent's own REST view: allocations and pod records."""
    _, alloc = agent.get("/v1/allocations")
    _, pods = agent.get("/v1/pods")
    return {"allocations": float(len(alloc["allocations"])), "records": float(len(pods["pods"]))}


def vpp(probe: VppProbe, owned: Owned, main_vrf: int, pod_vrf: int) -> dict[str, float]:
    """VPP's memory, CPU, interfaces, routes, neighbors and FIB entries: all, and the soak's."""
    ping = probe.ping_ms()
    if ping is None:
        return {"vpp_answers": 0.0}
    try:
        return _vpp(probe, owned, main_vrf, pod_vrf, ping)
    except CniError:  # it answered the ping, then stopped answering (docs/vpp.md, livelock)
        return {"vpp_answers": 0.0}


def _vpp(probe: VppProbe, owned: Owned, main_vrf: int, pod_vrf: int,
         ping: float) -> dict[str, float]:
    itfs = probe.interfaces()
    ours = {i.sw_if_index for i in itfs if i.tag in owned.live_tags}
    dead = {i.sw_if_index for i in itfs if i.tag in owned.dead_tags}
    neigh = probe.neighbors()
    pod_routes = probe.routes(pod_vrf)
    proc = process(probe.pid())
    return {
        "vpp_answers": 1.0,
        "vpp_ping_ms": ping,
        "vpp_heap_used_kib": probe.heap_used() / 1024,
        "vpp_api_trace_items": float(probe.api_trace_items()),
        "vpp_rss_kib": proc["rss_kib"],
        "vpp_cpu_s": proc["cpu_s"],
        "vpp_fds": proc["fds"],
        "vpp_fib_entries": float(probe.fib_entries()),
        "vpp_interfaces_all": float(len(itfs)),
        "vpp_interfaces_live_pods": float(len(ours)),
        "vpp_interfaces_dead_pods": float(len(dead)),
        "vpp_neighbors_all": float(len(neigh)),
        "vpp_neighbors_live_pods": float(sum(sw in ours for sw, _ in neigh)),
        "vpp_neighbors_dead_pods": float(sum(sw in dead or ip in owned.dead_addresses
                                             for sw, ip in neigh)),
        "vpp_routes_pod_vrf": float(len(pod_routes)),
        "vpp_routes_main_vrf": float(len(probe.routes(main_vrf))),
        "vpp_routes_dead_pods": float(sum(p.split("/")[0] in owned.dead_addresses
                                          for p in pod_routes)),
    }

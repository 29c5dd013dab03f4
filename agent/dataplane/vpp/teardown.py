"""Removing the driver's base configuration from VPP and the node, when a node leaves the cluster
(`vswitch-agent --teardown`) or a test is done with a real VPP; and the pod pool's pairs
(agent/dataplane/vpp/podpool) with it.

The inverse of base.ensure_base, found by tags and the config alone: the main VRF's default routes
via the interconnect, the routes between the main and the pod VRF, the interconnect (both ends),
the gateway loopback and the pod VRF's drop and default routes. Pods should be detached first.

The VRF tables themselves stay (empty, named vswitch-cni-*): on a real VPP 26.06 a pod VRF that
was deleted and created again with the same ID dropped every packet its default route should
have sent to the main VRF (ip4-lookup in the new table answered drop although `show ip fib`
listed the route), so the next agent on that VPP could not reach the node. An empty table costs
nothing and is reused as it is.
"""

from __future__ import annotations

import ipaddress
import logging

from agent.dataplane.vpp import afpacket, hostlink, interfaces, ip, names, tap
from agent.dataplane.vpp.api import VppApi
from agent.dataplane.vpp.config import VppConfig
from agent.dataplane.vpp.podlinks import PodLinks
from agent.linux import netlink

log = logging.getLogger(__name__)


def _defaults(ipv6: bool) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network("::/0" if ipv6 else "0.0.0.0/0")


def _host_link(api: VppApi, cfg: VppConfig) -> list[str]:
    removed = []
    hosts = interfaces.by_tag(api, names.HOST_TAG)
    host_sws = {i.sw_if_index for i in hosts}
    for ipv6 in (False, True):
        route = ip.routes(api, cfg.main_vrf_id, ipv6).get(_defaults(ipv6))
        if route is not None and host_sws & set(route.sw_if_indexes):
            ip.delete_route(api, cfg.main_vrf_id, _defaults(ipv6))
            removed.append(f"main VRF default route {_defaults(ipv6)}")
    taps, bound = tap.dump(api), afpacket.dump(api)
    for itf in hosts:
        if itf.sw_if_index in taps:
            tap.delete(api, itf.sw_if_index)
        for host, sw in bound.items():
            if sw == itf.sw_if_index:
                afpacket.delete(api, host)
                netlink.delete_link(host)
        removed.append(f"interconnect {itf.name}")
    hostlink.remove(cfg.host_ifname)
    return removed


def _pod_vrf(api: VppApi, cfg: VppConfig) -> list[str]:
    removed = []
    if cfg.main_vrf_id != cfg.pod_vrf_id:
        for subnet in cfg.pod_subnets:
            route = ip.routes(api, cfg.main_vrf_id, subnet.version == 6).get(subnet)
            if route is not None and route.via_tables == (cfg.pod_vrf_id,):
                ip.delete_route(api, cfg.main_vrf_id, subnet)
                removed.append(f"main VRF route {subnet}")
    for itf in interfaces.by_tag(api, names.GATEWAY_TAG):
        interfaces.delete_loopback(api, itf.sw_if_index)
        removed.append(f"gateway loopback {itf.name}")
    for table in sorted({cfg.pod_vrf_id, cfg.main_vrf_id}):
        for cluster in cfg.cluster_ranges:
            if ip.delete_route(api, table, cluster):
                removed.append(f"drop route {cluster} in table {table}")
    for subnet in cfg.pod_subnets:  # the pod VRF's own routes (pod routes go with the pods)
        default = _defaults(subnet.version == 6)
        for prefix in (subnet, default):
            if prefix in ip.routes(api, cfg.pod_vrf_id, subnet.version == 6) and \
                    ip.delete_route(api, cfg.pod_vrf_id, prefix):
                removed.append(f"pod VRF route {prefix}")
    return removed


def remove_base(api: VppApi, cfg: VppConfig) -> list[str]:
    """Removes the base configuration; returns what was removed (absent parts are skipped)."""
    return _host_link(api, cfg) + _pod_vrf(api, cfg)


def remove_pairs(api: VppApi, links: PodLinks) -> list[str]:
    """Deletes every pair tagged spare or retired, VPP's interface first (`--teardown`, with
    no pool running); returns what it removed."""
    removed = []
    for tag in (names.SPARE_TAG, names.RETIRED_TAG):
        for host in links.with_tag(tag):
            if interfaces.by_name(api, afpacket.vpp_name(host)) is not None:
                afpacket.delete(api, host)
            links.delete(host)
            removed.append(f"pair {host} ({tag})")
    return removed

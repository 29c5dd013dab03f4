"""VPP's base configuration for pods, made idempotent: start() may run any number of times.

- the pod VRF (and the main VRF when it is not table 0), per address family in use;
- the pod gateway: a loopback in the pod VRF holding each gateway address as a host prefix
  (/32, /128). Pod interfaces are unnumbered to it. A host prefix rather than the subnet's, so
  that no connected subnet route (which would ARP for absent pods) outranks ours;
- a drop route for each node pod subnet in the pod VRF: traffic to an address with no pod dies
  in VPP instead of looping towards the host;
- the VPP-host interconnect when configured (veth + AF_PACKET, or a TAP): VPP's end in the main
  VRF with its address, the pod subnets routed from the main VRF into the pod VRF, a default
  route from the pod VRF back to the main one, and on Linux a route to the pod subnets via VPP;
  each end holds the other as a static neighbor (VPP the node's end, Linux VPP's end: its
  address, and its link-local for IPv6 routes), so neither ever ARPs across the interconnect;
- the main VRF's default routes (IPv4 and IPv6) to the node's end of the interconnect
  (Contiv's design): whatever is not a pod of this node goes to the host, whose routing,
  kube-proxy and NAT take it from there (the node IP, host-network pods, Services, the world).
  IPv6 needs no interconnect subnet: both ends use the link-local addresses of their fixed MACs.

Objects are found again by their tags (names.GATEWAY_TAG, names.HOST_TAG).
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass

from agent.dataplane.vpp import afpacket, hostlink, interfaces, ip, names, neighbors, tap
from agent.dataplane.vpp.api import VppApi
from agent.dataplane.vpp.config import CHECKSUM_FEATURE, VppConfig
from agent.linux import netlink
from agent.model.pod import IPInterface

log = logging.getLogger(__name__)
HOST_LINUX_MAC = names.base_mac("host-linux")  # the node's end of the interconnect
HOST_VPP_MAC = names.base_mac("host-vpp")  # VPP's end
HOST_LINUX_LL = names.link_local(HOST_LINUX_MAC)
VPP_HOST_LL = names.link_local(HOST_VPP_MAC)


@dataclass(frozen=True)
class BaseObjects:
    gateway_sw_if_index: int
    host_sw_if_index: int | None


def _families(cfg: VppConfig) -> list[bool]:
    """is_ip6 values of the families pods use."""
    return sorted({g.version == 6 for g in cfg.pod_gateways})


def ensure_tables(api: VppApi, cfg: VppConfig) -> None:
    existing = ip.tables(api)
    for ipv6 in _families(cfg):
        if (cfg.pod_vrf_id, ipv6) not in existing:
            ip.add_table(api, cfg.pod_vrf_id, ipv6, "vswitch-cni-pods")
        if cfg.main_vrf_id != 0 and (cfg.main_vrf_id, ipv6) not in existing:
            ip.add_table(api, cfg.main_vrf_id, ipv6, "vswitch-cni-main")


def _bind(api: VppApi, sw_if_index: int, vrf_id: int, addrs: list[IPInterface]) -> None:
    """Exactly `addrs` on the interface, in table `vrf_id`. VPP refuses a table change on an
    addressed interface, so a changed config (another VRF or subnet) first loses the old
    addresses, then changes table, then gets the new ones."""
    present = set(interfaces.addresses(api, sw_if_index))
    wanted = set(addrs)
    for ipv6 in sorted({a.version == 6 for a in addrs}):
        if interfaces.get_table(api, sw_if_index, ipv6) != vrf_id:
            for old in sorted(a for a in present if (a.version == 6) == ipv6):
                interfaces.delete_address(api, sw_if_index, old)
                present.discard(old)
            interfaces.set_table(api, sw_if_index, vrf_id, ipv6)
    for old in sorted(present - wanted, key=str):
        interfaces.delete_address(api, sw_if_index, old)
    for addr in addrs:
        if addr not in present:
            interfaces.add_address(api, sw_if_index, addr)


def ensure_gateway(api: VppApi, cfg: VppConfig) -> int:
    found = interfaces.by_tag(api, names.GATEWAY_TAG)
    if found:
        sw_if_index = found[0].sw_if_index
    else:
        sw_if_index = interfaces.create_loopback(api, names.base_mac("pod-gateway"))
        interfaces.set_tag(api, sw_if_index, names.GATEWAY_TAG)
    host_prefixes = [
        ipaddress.ip_interface(f"{g.ip}/{g.max_prefixlen}") for g in cfg.pod_gateways
    ]
    _bind(api, sw_if_index, cfg.pod_vrf_id, host_prefixes)
    interfaces.set_admin_up(api, sw_if_index)
    return sw_if_index


def ensure_pod_routes(api: VppApi, cfg: VppConfig) -> None:
    # The cluster's pod ranges die in VPP unless a more specific route (this node's subnet, a
    # remote node's through the mesh) knows them: never back to the host, which routes them here.
    # Where Linux routes remote pods itself (route_cluster off) such a drop would cut them off.
    for table in sorted({cfg.pod_vrf_id, cfg.main_vrf_id}):
        for cluster in cfg.cluster_ranges:
            current = ip.routes(api, table, cluster.version == 6).get(cluster)
            dropped = current is not None and current.types == (ip.PATH_DROP,)
            if cfg.route_cluster and not dropped:
                ip.add_route(api, table, cluster, ip.drop(cluster))
            elif not cfg.route_cluster and dropped:
                ip.delete_route(api, table, cluster)
    for subnet in cfg.pod_subnets:
        current = ip.routes(api, cfg.pod_vrf_id, subnet.version == 6).get(subnet)
        if current is None or current.types != (ip.PATH_DROP,):
            ip.add_route(api, cfg.pod_vrf_id, subnet, ip.drop(subnet))


def ensure_host_link(api: VppApi, cfg: VppConfig) -> int | None:
    if cfg.vpp_host_ip is None or cfg.host_linux_ip is None:
        return None
    sw_if_index = _current_host_link(api, cfg)
    if sw_if_index is None and cfg.use_tap:
        # A veth interconnect of ours (veth mode before) holds the TAP's name: VPP would fail
        # with -13 (TUNSETIFF EINVAL).
        if netlink.links_with_alias_prefix(names.HOST_TAG).get(cfg.host_ifname) is not None:
            hostlink.remove(cfg.host_ifname)
        sw_if_index = _host_tap(api, cfg)
    elif sw_if_index is None:
        hostlink.ensure_veth_pair(
            cfg.host_ifname, cfg.host_vpp_ifname, cfg.interconnect_mtu, names.HOST_TAG,
            HOST_LINUX_MAC
        )
        sw_if_index = afpacket.create(
            api, cfg.host_vpp_ifname, HOST_VPP_MAC, cfg.host_afpacket
        )
    if not cfg.use_tap:
        hostlink.ensure_checksum(cfg.host_ifname, CHECKSUM_FEATURE, cfg.pod_checksum)
    interfaces.set_tag(api, sw_if_index, names.HOST_TAG)
    _bind(api, sw_if_index, cfg.main_vrf_id, [cfg.vpp_host_ip])
    interfaces.set_mtu(api, sw_if_index, cfg.interconnect_mtu)
    interfaces.set_admin_up(api, sw_if_index)
    # The node's end as a static neighbor: VPP would otherwise drop the first packet of
    # pod -> node traffic while it resolves the node by ARP.
    known = neighbors.dump(api, sw_if_index).get((sw_if_index, str(cfg.host_linux_ip.ip)))
    if known != HOST_LINUX_MAC:
        neighbors.add(api, sw_if_index, cfg.host_linux_ip.ip, HOST_LINUX_MAC)
    _cross_vrf_routes(api, cfg)
    _routes_to_host(api, cfg, sw_if_index, cfg.host_linux_ip)
    # The node forwards what pods send beyond it (egress, other nodes).
    netlink.enable_forwarding({s.version for s in cfg.pod_subnets})
    hostlink.ensure_address_and_routes(
        cfg.host_ifname, cfg.host_linux_ip, cfg.vpp_host_ip,
        [str(s) for s in (*cfg.pod_subnets, *cfg.routed_cluster_ranges)],
        VPP_HOST_LL, HOST_VPP_MAC, cfg.interconnect_mtu, cfg.mtu,
        unrouted=[str(s) for s in cfg.cluster_ranges if s not in cfg.routed_cluster_ranges],
        vpp_ifname=None if cfg.use_tap else cfg.host_vpp_ifname,
    )
    return sw_if_index


def _routes_to_host(api: VppApi, cfg: VppConfig, host_sw: int, host_ip: IPInterface) -> None:
    """Default routes of the main VRF to the node's end of the interconnect."""
    default4 = ipaddress.ip_network("0.0.0.0/0")
    ip.add_route(api, cfg.main_vrf_id, default4, ip.via_neighbor(default4, host_sw, host_ip.ip))
    if not any(s.version == 6 for s in cfg.pod_subnets):
        return
    if interfaces.get_table(api, host_sw, True) != cfg.main_vrf_id:
        interfaces.set_table(api, host_sw, cfg.main_vrf_id, True)
    interfaces.enable_ip6(api, host_sw, VPP_HOST_LL)
    known = neighbors.dump(api, host_sw).get((host_sw, str(HOST_LINUX_LL)))
    if known != HOST_LINUX_MAC:
        neighbors.add(api, host_sw, HOST_LINUX_LL, HOST_LINUX_MAC)
    default6 = ipaddress.ip_network("::/0")
    ip.add_route(api, cfg.main_vrf_id, default6, ip.via_neighbor(default6, host_sw, HOST_LINUX_LL))


def _current_host_link(api: VppApi, cfg: VppConfig) -> int | None:
    """VPP's tagged interconnect interface if it still fits the config and its Linux end is
    there; a stale one (other names or mode, Linux end deleted) is removed so it is made anew."""
    current = None
    taps = tap.dump(api)
    bound = afpacket.dump(api)
    for itf in interfaces.by_tag(api, names.HOST_TAG):
        sw = itf.sw_if_index
        fits = (
            taps.get(sw) is not None and taps[sw].host_ifname == cfg.host_ifname
            if cfg.use_tap
            else bound.get(cfg.host_vpp_ifname) == sw and netlink.link_exists(cfg.host_ifname)
        )
        if fits and current is None:
            current = sw
            continue
        log.warning("removing the stale VPP-host interconnect %s", itf.name)
        if sw in taps:
            tap.delete(api, sw)
        for host, host_sw in bound.items():
            if host_sw == sw:
                afpacket.delete(api, host)
                # Both ends of the veth pair go: the pair's names may be the new mode's.
                netlink.delete_link(host)
    return current


def _host_tap(api: VppApi, cfg: VppConfig) -> int:
    req = tap.TapRequest(
        vpp_mac=HOST_VPP_MAC, host_ifname=cfg.host_ifname, host_netns="",
        host_mac=HOST_LINUX_MAC, host_mtu=cfg.interconnect_mtu, rx_ring=cfg.tap_rx_ring_size,
        tx_ring=cfg.tap_tx_ring_size, tag=names.HOST_TAG,
    )
    return tap.create(api, req)


def _cross_vrf_routes(api: VppApi, cfg: VppConfig) -> None:
    if cfg.main_vrf_id == cfg.pod_vrf_id:
        return
    for subnet in cfg.pod_subnets:
        ip.add_route(api, cfg.main_vrf_id, subnet, ip.via_table(subnet, cfg.pod_vrf_id))
        default = ipaddress.ip_network("::/0" if subnet.version == 6 else "0.0.0.0/0")
        ip.add_route(api, cfg.pod_vrf_id, default, ip.via_table(default, cfg.main_vrf_id))


def ensure_base(api: VppApi, cfg: VppConfig) -> BaseObjects:
    ensure_tables(api, cfg)
    gateway = ensure_gateway(api, cfg)
    ensure_pod_routes(api, cfg)
    return BaseObjects(gateway, ensure_host_link(api, cfg))

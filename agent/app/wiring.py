"""What the composition root builds from the config for the wings below it: the dataplane
driver and its configuration, and the node's NAT plan. Only the app reads AgentConfig; the
drivers and the NAT table get plain, typed values.
"""

from __future__ import annotations

import ipaddress

from agent.app.config import AgentConfig
from agent.dataplane import Dataplane
from agent.dataplane.vpp.afpacket import RingOptions
from agent.dataplane.vpp.config import VppConfig
from agent.infra.metrics import Metrics
from agent.linux.hostnat import NatPlan
from agent.model.node import VXLAN_OVERHEAD, WIREGUARD_OVERHEAD
from ipam import NodeNetworks

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
DEFAULT_POD_POOL = 4


def make_dataplane(cfg: AgentConfig, networks: NodeNetworks,
                   metrics: Metrics | None = None) -> Dataplane:
    gateways = [
        ipaddress.ip_interface(f"{gw}/{subnet.prefixlen}")
        for gw, subnet in zip(networks.gateways, networks.pod_subnets, strict=True)
    ]
    if cfg.dataplane == "kernel":
        from agent.dataplane.kernel import KernelDataplane

        return KernelDataplane(gateways, cfg.mtu, cfg.gateway_interface, cfg.host_interface_prefix)
    from agent.dataplane.vpp import VppDataplane

    vpp = VppDataplane(vpp_config(cfg, networks))
    if metrics is not None:
        vpp.api.observe = metrics.vpp_call
    return vpp


def vpp_config(cfg: AgentConfig, networks: NodeNetworks) -> VppConfig:
    """The driver's config from the agent's config and this node's networks."""
    gateways = tuple(
        ipaddress.ip_interface(f"{gw}/{subnet.prefixlen}")
        for gw, subnet in zip(networks.gateways, networks.pod_subnets, strict=True)
    )
    return VppConfig(
        api_socket=cfg.vpp_api_socket,
        api_dir=cfg.vpp_api_dir or None,
        use_tap=cfg.use_tap_interfaces,
        tap_version=cfg.tap_interface_version,
        tap_rx_ring_size=cfg.tapv2_rx_ring_size,
        tap_tx_ring_size=cfg.tapv2_tx_ring_size,
        mtu=cfg.mtu,
        # VPP's own VXLAN (or WireGuard) packets to other nodes leave through the interconnect
        # (node_mesh.py); with Linux's mesh the interconnect carries the pods' packets as they are
        host_mtu=cfg.mtu + (_vpp_mesh_overhead(cfg, networks) if cfg.vxlan_in_vpp else 0),
        # VPP 26.06 cuts IPv4 GSO packets from AF_PACKET wrongly before its VXLAN (docs/vpp.md)
        pod_tso4=not cfg.vxlan_in_vpp,
        # VPP's wireguard plugin encrypts before a pending checksum is written (wireguard.py)
        pod_checksum=not (cfg.vxlan_in_vpp and cfg.encryption != "off"),
        main_vrf_id=cfg.main_vrf_id,
        pod_vrf_id=cfg.pod_vrf_id,
        pod_gateways=gateways,
        vpp_host_ip=networks.vpp_host_ip,
        host_linux_ip=networks.host_linux_ip,
        host_ifname=cfg.vpp_host_interface,
        host_vpp_ifname=cfg.vpp_host_peer_interface,
        pod_link_prefix=f"{cfg.host_interface_prefix}p",
        spare_link_prefix=f"{cfg.host_interface_prefix}s",
        pod_pool=DEFAULT_POD_POOL if cfg.vpp_pod_pool is None else cfg.vpp_pod_pool,
        cnat=cfg.service_translation == "vpp",
        route_cluster=cfg.vxlan_in_vpp,
        cluster_pod_nets=tuple(n for n in (cfg.ipam.pod_subnet_cidr, cfg.ipam.pod_subnet_v6_cidr)
                               if n is not None),
        afpacket=RingOptions(
            version=cfg.afpacket_version,
            qdisc_bypass=cfg.afpacket_qdisc_bypass,
            frame_size=cfg.afpacket_frame_size,
            rx_frames=cfg.afpacket_rx_frames,
            tx_frames=cfg.afpacket_tx_frames,
            rx_mode=cfg.interface_rx_mode,
        ),
        host_rx_frames=cfg.afpacket_host_rx_frames,
        host_tx_frames=cfg.afpacket_host_tx_frames,
    )


def nat_plan(cfg: AgentConfig) -> NatPlan:
    """What the node translates (agent/linux/hostnat), from the config."""
    ipam = cfg.ipam
    pods = [n for n in (ipam.pod_subnet_cidr, ipam.pod_subnet_v6_cidr) if n is not None]
    keep: list[IPNetwork] = [*pods]
    for net in (ipam.service_cidr, ipam.node_interconnect_cidr, ipam.vxlan_cidr,
                ipam.vpp_host_subnet_cidr, ipam.contiv_cidr):
        if net is not None:
            keep.append(net)
    keep += [ipaddress.ip_network(c) for c in cfg.nat_excluded_cidrs]
    return NatPlan(
        pod_nets=tuple(pods),
        keep=tuple(keep),
        external=cfg.nat_external_traffic,
        service_return=cfg.dataplane == "vpp",
        table=cfg.nat_table,
    )


def _vpp_mesh_overhead(cfg: AgentConfig, networks: NodeNetworks) -> int:
    """The bytes VPP's own mesh puts around a pod's packet: VXLAN's, or WireGuard's."""
    table = WIREGUARD_OVERHEAD if cfg.encryption != "off" else VXLAN_OVERHEAD
    return table[networks.vpp_host_subnet.version]

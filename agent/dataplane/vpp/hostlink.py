"""The Linux side of the VPP-host interconnect, in the node (calling thread's) namespace.

veth mode: a veth pair `vpp1` (Linux end, with the host's interconnect address) <-> `vpp2` (the end
VPP binds AF_PACKET to). TAP mode: VPP creates `vpp1` itself. Either way the node reaches its pods
through VPP: a kernel route to each pod subnet via VPP's interconnect address, which is a permanent
neighbor with VPP's fixed MAC (as the node's end is one in VPP). Every step is idempotent, so
start() can run again after an agent or VPP restart.
"""

from __future__ import annotations

import ipaddress

from agent.linux import ethtool, netlink
from agent.model.errors import DataplaneFailure
from agent.model.pod import IPInterface


def ensure_veth_pair(
    host_ifname: str, vpp_ifname: str, mtu: int, alias: str, host_mac: str
) -> None:
    """Creates the pair when missing (the Linux end with `host_mac`, which VPP knows as a
    static neighbor) and brings both ends up with `mtu` (also on a pair made before)."""
    with netlink.host_session() as links, netlink.translated(f"host link {host_ifname}"):
        if links.ifindex(host_ifname) is None:
            links.add_veth(host_ifname, vpp_ifname, mtu, host_mac)
        for name in (host_ifname, vpp_ifname):
            index = links.ifindex(name)
            if index is None:
                raise DataplaneFailure(
                    f"host link: {name} is missing",
                    f"{host_ifname} exists but is not paired with {vpp_ifname}",
                )
            mac = host_mac if name == host_ifname else None
            links.set_link(index, up=True, alias=alias, mtu=mtu, mac=mac)


def ensure_checksum(host_ifname: str, feature: str, on: bool) -> None:
    """The Linux end's checksum offload as asked: off, the node's own packets into VPP carry
    their checksums (VPP's own WireGuard, VppConfig.pod_checksum); on again otherwise."""
    with netlink.translated(f"checksum offload of host link {host_ifname}"):
        if ethtool.feature(None, host_ifname, feature) != on:
            ethtool.set_feature(None, host_ifname, feature, on)


def ensure_address_and_routes(
    host_ifname: str, address: IPInterface, via: IPInterface, subnets: list[str],
    via6: ipaddress.IPv6Address, vpp_mac: str, link_mtu: int, pod_mtu: int,
    unrouted: list[str] | None = None, vpp_ifname: str | None = None,
) -> None:
    """`address` on the Linux end, and a route to each pod subnet via VPP's end: its address
    of that family, or its link-local address `via6` for IPv6 subnets over an IPv4 link.

    Each gateway the routes use is a permanent neighbor with VPP's MAC `vpp_mac`. Linux must
    not ARP for it: it would ask with the source of the packet it sends (arp_announce 0), e.g.
    the node's main address when it answers a pod, and VPP drops an ARP request whose sender is
    not on the interconnect's subnet, so the entry fails and the answer is never sent.

    The link's MTU (`link_mtu`) makes room for VPP's VXLAN (or WireGuard) packets, on both ends
    of a veth link (`vpp_ifname`, VPP's end: the kernel drops what VPP sends there above its
    MTU, so a changed mesh, a restart with encryption, must raise it too); the routes to the
    pods carry the pods' MTU, so the node answers a too-large packet for a pod itself.
    `unrouted`: subnets whose route over the link (an earlier config's) must go."""
    with netlink.host_session() as links, netlink.translated(
        f"host link {host_ifname} addressing"
    ):
        index = links.ifindex(host_ifname)
        if index is None:
            raise DataplaneFailure(f"host link {host_ifname} is missing")
        links.set_link(index, up=True, mtu=link_mtu)
        peer = links.ifindex(vpp_ifname) if vpp_ifname else None
        if peer is not None:
            links.set_link(peer, mtu=link_mtu)
        # the kernel's duplicate address detection left on, as this link always had it
        links.add_address(index, address, nodad=False)
        gateways = [
            str(via.ip) if (":" in subnet) == (address.version == 6) else str(via6)
            for subnet in subnets
        ]
        for gateway in sorted({str(via.ip), *gateways}):
            # "replace" also turns an entry the kernel learnt (or failed to learn) into ours.
            links.replace_neighbor(index, gateway, vpp_mac)
        for subnet, gateway in zip(subnets, gateways, strict=True):
            links.replace_route(subnet, gateway, index, mtu=pod_mtu)
        for subnet in unrouted or ():
            links.delete_route(subnet, index)


def remove(host_ifname: str) -> None:
    """Deletes the Linux end (its routes and a veth peer go with it)."""
    netlink.delete_link(host_ifname)

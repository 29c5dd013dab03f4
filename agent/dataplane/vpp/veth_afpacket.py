"""Wiring mode veth + AF_PACKET: a veth pair (host end in the node namespace, peer in the pod)
and VPP bound to the host end with an AF_PACKET socket (`host-vsw<digest>` in VPP).

Works on every kernel (no /dev/vhost-net needed); costs a kernel hop compared with TAP v2.

Removal order: VPP's AF_PACKET interface first, then the veth, and the veth only once VPP has
no binding on it. A veth that goes first leaves VPP polling a socket whose device is gone (VPP
26.06 logs `af_packet_fd_error: Network is down`, and under pod churn such sockets once made it
spin at 100 % CPU and stop answering its API). A VPP that does not answer may still hold the
socket, so then the veth stays: the DEL fails with 11 and its retry removes both in order.
"""

from __future__ import annotations

from agent.dataplane import UndoStack
from agent.dataplane.vpp import afpacket, interfaces, names
from agent.dataplane.vpp.api import VppApi
from agent.dataplane.vpp.interfaces import set_tag
from agent.dataplane.vpp.modes import Port
from agent.infra import failpoints
from agent.linux import ethtool, netlink
from agent.model.pod import PodNetwork


class VethAfPacket:
    name = "veth-afpacket"

    def __init__(
        self, api: VppApi, mtu: int, rings: afpacket.RingOptions, pod_tso4: bool = True
    ) -> None:
        self.api = api
        self.mtu = mtu
        self.rings = rings
        self.pod_tso4 = pod_tso4

    def check_usable(self) -> None:
        """AF_PACKET needs nothing beyond a kernel with veth support."""

    def create(self, pod: PodNetwork, tag: str, undo: UndoStack) -> Port:
        host = names.veth_host_ifname(pod.key)
        pod_mac = names.pod_mac(pod.key)
        vpp_mac = names.vpp_mac(pod.key)
        netlink.create_veth(host, pod.netns, pod.key.ifname, pod.mtu or self.mtu, pod_mac, tag)
        undo.push(f"delete veth {host}", lambda: netlink.delete_link(host))
        if not self.pod_tso4:
            self._tso4_off(pod)
        sw_if_index = afpacket.create(self.api, host, vpp_mac, self.rings)
        undo.push(f"delete af_packet {host}", lambda: afpacket.delete(self.api, host))
        # Tagged first, so that even a half-wired interface is found again by its owner.
        set_tag(self.api, sw_if_index, tag)
        return Port(sw_if_index, host, pod_mac, vpp_mac)

    @staticmethod
    def _tso4_off(pod: PodNetwork) -> None:
        """The pod's kernel segments its IPv4 TCP itself (GSO in software, before the veth).
        VPP 26.06 segments an IPv4 GSO packet read by AF_PACKET as if it were IPv6 (its GSO
        code takes the family from the IP-checksum offload flag, which AF_PACKET input never
        sets), so with the node mesh, where VPP must segment before the VXLAN encapsulation,
        large IPv4 TCP packets would leave broken. IPv6 keeps its offload."""
        with netlink.translated(f"switching IPv4 TSO off on {pod.key.ifname} in the pod"):
            ethtool.set_feature(pod.netns, pod.key.ifname, "tx-tcp-segmentation", False)

    def adopt(self, pod: PodNetwork, tag: str, undo: UndoStack) -> Port | None:
        """After a VPP restart the veth pair is still there (its pod end keeps the pod's
        addresses and routes): only VPP's AF_PACKET interface is made again. None when the
        veth itself is gone."""
        host = names.veth_host_ifname(pod.key)
        if not netlink.link_exists(host):
            return None
        vpp_mac = names.vpp_mac(pod.key)
        if interfaces.by_name(self.api, afpacket.vpp_name(host)) is not None:
            # A binding left in place (a damaged pod, not a restart). Asked blindly, a VPP
            # without one logs a warning for every pod it restores.
            afpacket.delete(self.api, host)
        sw_if_index = afpacket.create(self.api, host, vpp_mac, self.rings)
        undo.push(f"delete af_packet {host}", lambda: afpacket.delete(self.api, host))
        set_tag(self.api, sw_if_index, tag)
        return Port(sw_if_index, host, names.pod_mac(pod.key), vpp_mac)

    def vpp_name(self, pod: PodNetwork) -> str | None:
        return afpacket.vpp_name(names.veth_host_ifname(pod.key))

    def remove(self, pod: PodNetwork, sw_if_index: int | None) -> None:
        host = names.veth_host_ifname(pod.key)
        if sw_if_index is not None:
            # Raises when VPP refuses or does not answer: the veth stays (see the docstring).
            afpacket.delete(self.api, host)
            failpoints.hit("del:vpp-afpacket")
        netlink.delete_link(host)

    def problems(self, pod: PodNetwork, sw_if_index: int) -> list[str]:
        host = names.veth_host_ifname(pod.key)
        out = []
        if not netlink.link_exists(host):
            out.append(f"veth host end {host} is missing")
        itf = interfaces.by_name(self.api, afpacket.vpp_name(host))
        if itf is None or itf.dev_type != afpacket.DEV_TYPE or itf.sw_if_index != sw_if_index:
            out.append(f"VPP has no AF_PACKET interface on {host} as sw_if_index {sw_if_index}")
        return out

"""Wiring mode TAP v2: VPP creates a virtio TAP whose Linux end it puts straight into the pod's
namespace under the pod's interface name (Contiv's `UseTAPInterfaces: true`).

VPP's TAP driver opens /dev/vhost-net; a kernel without it (no vhost_net module) makes every
tap_create fail with retval -11, so the mode checks for it up front and says what to do.
"""

from __future__ import annotations

import os

from agent.dataplane.undo import UndoStack
from agent.dataplane.vpp import interfaces, names, tap
from agent.dataplane.vpp.api import VppApi, VppCallFailed
from agent.dataplane.vpp.modes import Port
from agent.linux.netns import PodNetns
from agent.model.errors import DataplaneFailure
from agent.model.pod import PodNetwork, Wiring

SYSCALL_ERROR_1 = -11
VHOST_HINT = (
    "TAP interfaces need /dev/vhost-net on the node (modprobe vhost_net); "
    "or set UseTAPInterfaces: false to wire pods with veth + AF_PACKET"
)


class TapV2:
    name = "tapv2"

    def __init__(
        self, api: VppApi, mtu: int, rx_ring: int, tx_ring: int, vhost_net: str
    ) -> None:
        self.api = api
        self.mtu = mtu
        self.rx_ring = rx_ring
        self.tx_ring = tx_ring
        self.vhost_net = vhost_net

    def check_usable(self) -> None:
        if not os.path.exists(self.vhost_net):
            raise DataplaneFailure(f"{self.vhost_net} does not exist", VHOST_HINT)

    def create(self, pod: PodNetwork, tag: str, undo: UndoStack,
               netns: PodNetns | None = None) -> Port:
        if len(pod.netns) > tap.NETNS_MAX:
            raise DataplaneFailure(
                f"CNI_NETNS {pod.netns!r} is longer than VPP's TAP host_namespace "
                f"({tap.NETNS_MAX} characters)", "use veth + AF_PACKET (UseTAPInterfaces: false)"
            )
        pod_mac = names.pod_mac(pod.key)
        vpp_mac = names.vpp_mac(pod.key)
        req = tap.TapRequest(
            vpp_mac=vpp_mac, host_ifname=pod.key.ifname, host_netns=pod.netns, host_mac=pod_mac,
            host_mtu=pod.mtu or self.mtu, rx_ring=self.rx_ring, tx_ring=self.tx_ring, tag=tag,
        )
        try:
            sw_if_index = tap.create(self.api, req)
        except VppCallFailed as exc:
            if exc.retval == SYSCALL_ERROR_1:
                exc.details = f"{exc.details}; {VHOST_HINT}"
            raise
        undo.push(f"delete TAP {sw_if_index}", lambda: self.remove(pod, sw_if_index, None))
        # The Linux end lives in the pod; the record keeps VPP's name for the TAP (tapN).
        itf = interfaces.get(self.api, sw_if_index)
        vpp_name = itf.name if itf else f"tap-{sw_if_index}"
        return Port(sw_if_index, vpp_name, pod_mac, vpp_mac)

    def adopt(self, pod: PodNetwork, tag: str, undo: UndoStack, wiring: Wiring) -> Port | None:
        """A TAP's kernel end dies with the VPP that opened it: nothing to adopt."""
        return None

    def vpp_names(self, pod: PodNetwork, wiring: Wiring | None) -> list[str] | None:
        return None  # VPP numbers its TAPs: found by their tag

    def remove(self, pod: PodNetwork, sw_if_index: int | None, wiring: Wiring | None) -> None:
        # VPP removes the Linux end (in the pod namespace) together with the TAP.
        if sw_if_index is not None and sw_if_index in tap.dump(self.api):
            tap.delete(self.api, sw_if_index)

    def problems(self, pod: PodNetwork, sw_if_index: int, wiring: Wiring) -> list[str]:
        details = tap.dump(self.api).get(sw_if_index)
        if details is None:
            return [f"VPP has no TAP with sw_if_index {sw_if_index}"]
        out = []
        if details.host_ifname != pod.key.ifname:
            out.append(f"TAP {sw_if_index} has host end {details.host_ifname!r}, "
                       f"expected {pod.key.ifname!r}")
        return out

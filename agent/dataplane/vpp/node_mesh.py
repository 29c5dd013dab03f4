"""The node mesh with `Dataplane: vpp`: VPP's VXLAN mesh plus the node's Linux routes it rides on.

The uplink stays Linux's (docs/vpp.md, "The node mesh in VPP"). Per remote node:

    Linux   routes via the remote node IP on the uplink (`onlink`, protocol 118, like the kernel
            mesh's): the remote VPP-host subnet (the VXLAN packets' destination) and the remote
            pod subnets (the node's own traffic to remote pods: host-network pods, probes,
            kube-proxy's DNAT to a remote backend); IPv6 subnets via fe80::2b:0:<ID>, a
            permanent neighbor to the remote uplink's MAC. This is KernelMesh's L2 mode.
    VPP     VppMesh: the tunnel from VPP's interconnect address to the remote one, bridged to
            the BVI, static neighbor and L2 FIB entry, pod-VRF routes (mesh.py).

Order: Linux first (a tunnel without its route would send into nothing), VPP after; removal
the reverse. With `VXLANOwner: linux` (the default) or `UseL2Interconnect` there is no VPP part
at all: VPP's main VRF already sends everything that is not its own pods to the node, and Linux
carries it to the remote node as the kernel dataplane does (its VXLAN device, or routes via the
remote node IPs; with `Encryption`, its WireGuard device: docs/encryption.md); `stale`, VPP's
mesh, is then only removed (a node that ran VPP's own tunnels before). Pods keep their IPv4 TSO
that way: VPP never segments a GSO packet, because every interface it forwards them to (pods,
interconnect) takes them whole (docs/vpp.md).

A restarted VPP has lost the mesh: `prune` (every registry relist) programs again every remote
node whose tunnel is missing, after the driver's base configuration is back.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection
from typing import TYPE_CHECKING

from agent.dataplane.kernel_mesh import KernelMesh
from agent.dataplane.vpp.mesh import VppMesh, tunnel_endpoint
from agent.dataplane.wireguard_mesh import PermissiveMesh, WireGuardMesh
from agent.model.errors import InvalidConfig
from agent.model.node import VXLAN_OVERHEAD, NodeInfo

if TYPE_CHECKING:
    from agent.dataplane.vpp.driver import VppDataplane


class VppNodeMesh:
    """`MeshDataplane` (agent/cluster/controller.py) for the VPP dataplane."""

    def __init__(
        self, driver: VppDataplane, linux: KernelMesh | WireGuardMesh | PermissiveMesh,
        vpp: VppMesh | None, pod_mtu: int,
        stale: VppMesh | None = None,
    ) -> None:
        self.driver = driver
        self.linux = linux
        self.vpp = vpp
        self.pod_mtu = pod_mtu
        self.stale = stale if vpp is None else None
        self._cleared = -1  # the VPP connection generation `stale` was last removed on

    def check_mtu(self, local: NodeInfo) -> None:
        """A pod's full-size packet, VXLAN-encapsulated by VPP, must fit the uplink (the outer
        header's family is the VPP-host subnet's); with the L2 interconnect, as the kernel."""
        if self.vpp is None:
            self.linux.check_mtu(local)
            return
        up = self.linux.uplink(local)
        if up is None:
            return
        overhead = VXLAN_OVERHEAD[ipaddress.ip_network(local.vpp_host_subnet).version]
        if self.pod_mtu > up.mtu - overhead:
            raise InvalidConfig(
                f"MTUSize {self.pod_mtu} does not fit the uplink {up.name} (MTU {up.mtu}) "
                f"over VXLAN ({overhead} bytes)",
                f"set MTUSize to at most {up.mtu - overhead}, or raise the uplink's MTU",
            )

    def program(self, local: NodeInfo, remote: NodeInfo) -> None:
        self.linux.program(local, remote)
        if self.vpp is not None:
            self.driver.ensure()  # the base (VRFs, interconnect) first: a new VPP lacks it
            self.vpp.program(local, remote)

    def unprogram(
        self, local: NodeInfo, remote: NodeInfo, keep: list[NodeInfo]
    ) -> list[str]:
        removed = self.vpp.unprogram(local, remote, keep) if self.vpp is not None else []
        return removed + self.linux.unprogram(local, remote, keep)

    def prune(self, local: NodeInfo, keep: Collection[NodeInfo]) -> list[str]:
        """Removes what no node in `keep` explains, in Linux and VPP, and programs again the
        nodes whose tunnel VPP lost (a VPP restart) or whose routes went missing."""
        changed = self.linux.prune(local, keep)
        if self.vpp is None:
            # once per VPP connection: only a VPP that ran VPP's mesh can hold it (its
            # interface dump is not repeated at every relist)
            if self.stale is not None and self.stale.generation() != self._cleared:
                changed += self.stale.remove(local)
                self._cleared = self.stale.generation()
            return changed
        self.driver.ensure()
        changed += self.vpp.prune(local, keep)
        held = {t.node_id: t.dst for t in self.vpp.tunnels()}
        for remote in keep:
            if held.get(remote.node_id) != tunnel_endpoint(remote):
                self.vpp.program(local, remote)
                changed.append(f"restored node {remote.name} in VPP")
        return changed

"""The node mesh with `Dataplane: vpp`: VPP's VXLAN mesh plus the node's Linux routes it rides on.

The uplink stays Linux's (docs/vpp.md, "The node mesh in VPP"). Per remote node:

    Linux   routes via the remote node IP on the uplink (`onlink`, protocol 118, like the kernel
            mesh's): the remote VPP-host subnet (the VXLAN packets' destination) and the remote
            pod subnets (the node's own traffic to remote pods: host-network pods, probes,
            kube-proxy's DNAT to a remote backend); IPv6 subnets via fe80::2b:0:<ID>, a
            permanent neighbor to the remote uplink's MAC. This is KernelMesh's L2 mode.
    VPP     VppMesh: the tunnel from VPP's interconnect address to the remote one, bridged to
            the BVI, static neighbor and L2 FIB entry, pod-VRF routes (mesh.py).

With `Encryption: wireguard` VPP's own WireGuard takes the tunnels' place (VppWireGuard,
wireguard.py: a peer per remote node, its endpoint the remote interconnect address), and Linux
routes only the remote VPP-host subnets: the node's own traffic to remote pods goes into VPP by
the cluster range route and is encrypted there, never sent beside it in clear.

Order: Linux first (a tunnel without its route would send into nothing), VPP after; removal
the reverse. With `VXLANOwner: linux` (the default) or `UseL2Interconnect` there is no VPP part
at all: VPP's main VRF already sends everything that is not its own pods to the node, and Linux
carries it to the remote node as the kernel dataplane does (its VXLAN device, or routes via the
remote node IPs; with `Encryption`, its WireGuard device: docs/encryption.md). `stale`, the
VPP meshes not configured (VXLAN tunnels, WireGuard interface), are only removed: a node that ran
them before. Pods keep their IPv4 TSO
that way: VPP never segments a GSO packet, because every interface it forwards them to (pods,
interconnect) takes them whole (docs/vpp.md).

A restarted VPP has lost the mesh: `prune` (every registry relist) programs again every remote
node whose tunnel or peer is missing, after the driver's base configuration is back.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from agent.dataplane.kernel_mesh import KernelMesh
from agent.dataplane.vpp.mesh import VppMesh
from agent.dataplane.vpp.wireguard import VppWireGuard
from agent.dataplane.wireguard_mesh import BothMeshes, PermissiveMesh, WireGuardMesh
from agent.model.errors import InvalidConfig
from agent.model.node import NodeInfo

if TYPE_CHECKING:
    from agent.dataplane.vpp.driver import VppDataplane


class VppNodeMesh:
    """`MeshDataplane` (agent/cluster/controller.py) for the VPP dataplane."""

    def __init__(
        self, driver: VppDataplane, linux: KernelMesh | WireGuardMesh | PermissiveMesh,
        vpp: VppMesh | VppWireGuard | VppPermissive | None, pod_mtu: int,
        stale: tuple[VppMesh | VppWireGuard, ...] = (),
    ) -> None:
        self.driver = driver
        self.linux = linux
        self.vpp = vpp
        self.pod_mtu = pod_mtu
        self.stale = stale
        self._cleared = -1  # the VPP connection generation `stale` was last removed on

    def check_mtu(self, local: NodeInfo) -> None:
        """A pod's full-size packet, encapsulated by VPP (VXLAN, or WireGuard), must fit the
        uplink (the outer header's family is the VPP-host subnet's); with the L2 interconnect,
        as the kernel."""
        if self.vpp is None:
            self.linux.check_mtu(local)
            return
        up = self.linux.uplink(local)
        if up is None:
            return
        overhead = self.vpp.overhead(local)
        if self.pod_mtu > up.mtu - overhead:
            raise InvalidConfig(
                f"MTUSize {self.pod_mtu} does not fit the uplink {up.name} (MTU {up.mtu}) "
                f"over {self.vpp.describe(local)}",
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
        nodes whose tunnel or peer VPP lost (a VPP restart) or whose routes went missing."""
        changed = self.linux.prune(local, keep)
        # once per VPP connection: only a VPP that ran the other mesh can hold it (its dumps
        # are not repeated at every relist)
        if self.stale and self.stale[0].generation() != self._cleared:
            if self.vpp is not None:
                self.driver.ensure()
            for other in self.stale:
                changed += other.remove(local)
            self._cleared = self.stale[0].generation()
        if self.vpp is None:
            return changed
        self.driver.ensure()
        changed += self.vpp.prune(local, keep)
        for remote in self.vpp.missing(local, keep):
            self.vpp.program(local, remote)
            changed.append(f"restored node {remote.name} in VPP")
        return changed


class VppPermissive(BothMeshes):
    """`BothMeshes` in VPP (`Encryption: wireguard-permissive` with `VXLANOwner: vpp`): VPP's
    WireGuard and VPP's VXLAN tunnels. The main VRF's routes into the pod VRF serve both (the
    node's own traffic to remote pods goes through VPP either way)."""

    wireguard: VppWireGuard
    vxlan: VppMesh

    def generation(self) -> int:
        return self.wireguard.generation()

    def overhead(self, local: NodeInfo) -> int:
        return self.wireguard.overhead(local)  # the larger of the two

    def describe(self, local: NodeInfo) -> str:
        return self.wireguard.describe(local)

    def programmed_clear(self, remote: NodeInfo) -> None:
        self.wireguard.cross(remote)

    def prune(self, local: NodeInfo, keep: Collection[NodeInfo]) -> list[str]:
        encrypted = [n for n in keep if n.wg_public_key]
        clear = [n for n in keep if not n.wg_public_key]
        return (self.vxlan.prune(local, clear)
                + self.wireguard.prune(local, encrypted, crossed=clear))

    def missing(self, local: NodeInfo, keep: Collection[NodeInfo]) -> list[NodeInfo]:
        return (self.wireguard.missing(local, [n for n in keep if n.wg_public_key])
                + self.vxlan.missing(local, [n for n in keep if not n.wg_public_key]))

    def remove(self, local: NodeInfo) -> list[str]:
        return self.wireguard.remove(local) + self.vxlan.remove(local)

"""The kernel dataplane's half of the node mesh: a VXLAN overlay (or plain routes) to remote nodes.

VXLAN mode (default): one VXLAN device per node (`ifname`, VNI 10, UDP 4789, local = node IP, no
learning, MAC derived from the node ID, the node's VXLAN address on it as a /32). Per remote node:

    FDB        remote VXLAN MAC -> remote node IP              (permanent, on the device)
    neighbor   remote VXLAN address -> remote VXLAN MAC        (IPv4 next hop)
    neighbor   fe80::2b:0:<ID> -> remote VXLAN MAC             (IPv6 next hop, see node.link_local)
    routes     remote pod subnets via those next hops, onlink, protocol `RTPROT_MESH`
    route      remote VXLAN address/32 on the device, protocol `RTPROT_MESH`

That last route makes the VXLAN addresses an overlay every node reaches: a connection the node
itself opens to a remote pod leaves with the device's address as its source (it is the address
of the route's device; a masquerade there, kube-proxy's for a ClusterIP or NodePort whose backend
is on another node, picks it too), and the remote node must route the answer back to it.

L2 interconnect mode (`UseL2Interconnect`): no device; IPv4 pod subnets via the remote node IP on
the uplink, IPv6 ones via fe80::2b:0:<ID>, a permanent neighbor to the remote uplink's MAC.
With the VPP dataplane this mode is the Linux half of the node mesh (agent/dataplane/vpp/
node_mesh.py): `route_vpp_host` adds the remote VPP-host subnet to the routed subnets, the way
VPP's VXLAN packets (sourced from VPP's interconnect address) reach the remote VPP.

Everything is written with replace semantics, so programming a node twice leaves one copy. Our
routes carry their own protocol number and our neighbors are permanent ones on our device (or our
fe80::2b:0:0/96 next hops on the uplink), so `prune` finds exactly what the mesh made, also after an
agent restart, and removes what no current remote node explains. The uplink is the interface that
holds the node IP; the VXLAN device's MTU is the uplink's minus the encapsulation, and a pod MTU
above it is refused (`check_mtu`). Runs in the calling thread's namespace, like kernel.py.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from agent.linux import netlink
from agent.linux.iproute import Session, Vxlan
from agent.linux.nlcodec import NUD_PERMANENT, RT_SCOPE_LINK
from agent.model.errors import DataplaneFailure, InvalidConfig
from agent.model.node import VXLAN_OVERHEAD, NodeInfo, link_local, vxlan_mac

RTPROT_MESH = 118  # the protocol number on our routes (iproute2: "proto 118")
LINK_LOCALS = ipaddress.IPv6Network("fe80::2b:0:0/96")  # node.link_local(ID) for every ID


Deleter = Callable[[], bool]  # deletes one mesh object; False: it was gone already


@dataclass(frozen=True)
class Uplink:
    index: int
    name: str
    mtu: int
    mac: str


class KernelMesh:
    """`MeshDataplane` on Linux: VXLAN device, FDB, neighbors and routes."""

    def __init__(
        self,
        pod_mtu: int,
        ifname: str = "vxlan-vsw",
        vni: int = 10,
        port: int = 4789,
        l2_interconnect: bool = False,
        route_vpp_host: bool = False,
        stale_links: tuple[str, ...] = (),
        route_pods: bool = True,
    ) -> None:
        self.pod_mtu = pod_mtu
        self.stale_links = stale_links  # devices of another mesh (WireGuard's), removed by prune
        self.route_vpp_host = route_vpp_host and l2_interconnect
        # False: only the VPP-host subnets (VPP's own WireGuard carries the pods' traffic and
        # the node's own to remote pods, which Linux routes into VPP: never beside it in clear)
        self.route_pods = route_pods or not self.route_vpp_host
        self.ifname = ifname
        self.vni = vni
        self.port = port
        self.l2 = l2_interconnect
        self._lock = threading.Lock()  # device creation vs. concurrent program calls
        self._cache: tuple[Uplink, int | None] | None = None

    # ---- node-wide --------------------------------------------------------------------------

    def uplink(self, local: NodeInfo) -> Uplink | None:
        return find_uplink(local)

    def overhead(self, local: NodeInfo) -> int:
        return 0 if self.l2 else VXLAN_OVERHEAD[ipaddress.ip_address(local.node_ip).version]

    def check_mtu(self, local: NodeInfo) -> None:
        """Raises InvalidConfig when pods' full-size packets would not fit the uplink."""
        how = "the L2 interconnect" if self.l2 else f"VXLAN ({self.overhead(local)} bytes)"
        check_fits(self.pod_mtu, local, self.overhead(local), how)

    def _device(self, links: Session, local: NodeInfo, up: Uplink) -> int:
        """The VXLAN device's index, created (or re-created when its settings differ)."""
        want = Vxlan(self.vni, self.port, local.node_ip)
        index = links.ifindex(self.ifname)
        if index is not None and links.vxlan(index) != want:
            links.delete_link(index)
            index = None
        if index is None:
            index = links.add_vxlan(self.ifname, want, up.index)
        self._settle(links, index, local.vxlan_mac, up.mtu - self.overhead(local))
        links.add_address(index, ipaddress.ip_interface(f"{local.vxlan_ip}/32"))
        return index

    @staticmethod
    def _settle(links: Session, index: int, mac: str, mtu: int) -> None:
        """MAC, MTU and up, each set only when it differs: setting a MAC (even the same one)
        makes the kernel flush every neighbor of the device, our permanent ones included."""
        link = links.link(index)
        new_mac = mac if link.mac.lower() != mac else None
        new_mtu = mtu if link.mtu != mtu else None
        if new_mac or new_mtu or not link.up:
            links.set_link(index, up=True if not link.up else None, mtu=new_mtu, mac=new_mac)

    # ---- per remote node --------------------------------------------------------------------

    def program(self, local: NodeInfo, remote: NodeInfo) -> None:
        """Makes the state for `remote` present (replace semantics: idempotent)."""
        with self._programming(local) as (links, up, index):
            if self.l2:
                self._program_l2(links, up, remote)
                return
            assert index is not None
            links.replace_fdb(index, remote.vxlan_mac, remote.node_ip)
            links.replace_neighbor(index, remote.vxlan_ip, remote.vxlan_mac)
            links.replace_neighbor(index, link_local(remote.node_id), remote.vxlan_mac)
            for subnet in remote.pod_subnets:
                self._route(links, index, subnet, self._vxlan_gateway(remote, subnet))
            self._route(links, index, host_prefix(remote.vxlan_ip), None)

    def routed_subnets(self, remote: NodeInfo) -> tuple[str, ...]:
        """The remote subnets the L2 interconnect routes via the remote node."""
        extra = (remote.vpp_host_subnet,) if self.route_vpp_host else ()
        return (*(remote.pod_subnets if self.route_pods else ()), *extra)

    def _program_l2(self, links: Session, up: Uplink, remote: NodeInfo) -> None:
        for subnet in self.routed_subnets(remote):
            if ipaddress.ip_network(subnet).version == ipaddress.ip_address(remote.node_ip).version:
                self._route(links, up.index, subnet, remote.node_ip)
                continue
            if not remote.uplink_mac:
                raise DataplaneFailure(f"node {remote.name} published no uplink MAC")
            links.replace_neighbor(up.index, link_local(remote.node_id), remote.uplink_mac)
            self._route(links, up.index, subnet, link_local(remote.node_id))

    @staticmethod
    def _vxlan_gateway(remote: NodeInfo, subnet: str) -> str:
        v6 = ipaddress.ip_network(subnet).version == 6
        return link_local(remote.node_id) if v6 else remote.vxlan_ip

    @contextmanager
    def _programming(
        self, local: NodeInfo
    ) -> Iterator[tuple[Session, Uplink, int | None]]:
        """A netlink socket, the uplink and the device's index (None with the L2 interconnect).

        Uplink and device are checked once and remembered (1000 remote nodes must not cost
        1000 address dumps); any failure, and every prune, makes the next call check again."""
        with self._lock:
            cached = self._cache
            if cached is None:
                up = self.uplink(local)
                if up is None:
                    raise DataplaneFailure(
                        f"node IP {local.node_ip} is on no interface of this node")
                index = None
                if not self.l2:
                    with netlink.host_session() as links, netlink.translated(
                        "making the VXLAN device"
                    ):
                        index = self._device(links, local, up)
                cached = self._cache = (up, index)
        try:
            with netlink.host_session() as links, netlink.translated("programming the node mesh"):
                yield links, cached[0], cached[1]
        except BaseException:
            self._cache = None
            raise

    @staticmethod
    def _route(links: Session, index: int, dst: str, gateway: str | None) -> None:
        """A mesh route to `dst` via `gateway` (onlink), or on the link when None."""
        links.replace_route(dst, gateway, index, onlink=True, proto=RTPROT_MESH)

    def unprogram(
        self, local: NodeInfo, remote: NodeInfo, keep: Collection[NodeInfo] = ()
    ) -> list[str]:
        """Removes the state of `remote` that no node in `keep` needs; gone already is fine.
        Deletes exactly those objects (no dump: one removal among 1000 nodes stays cheap)."""
        gone = _wanted(self, [remote]) - _wanted(self, keep)
        up = self.uplink(local)
        removed: list[str] = []
        with netlink.host_session() as links, netlink.translated("removing a node from the mesh"):
            index = up.index if self.l2 and up else links.ifindex(self.ifname)
            if index is None:
                return removed
            for what in sorted(gone):
                if _delete(links, what, index)():
                    removed.append(" ".join(map(str, what)))
        return removed

    def prune(self, local: NodeInfo, keep: Collection[NodeInfo],
              foreign: Collection[str] = ()) -> list[str]:
        """Makes the kernel hold exactly what the nodes in `keep` need: removes what none of
        them explains (nodes removed while this agent was down, leftovers of a changed config)
        and programs again the nodes whose objects went missing (a device or route deleted
        behind the agent's back). Routes to `foreign` prefixes are another mesh's (WireGuard's,
        beside this one while encryption is rolled out) and stay. Returns what it changed."""
        self._cache = None  # check uplink and device again on the next program()
        want = _wanted(self, keep)
        changed: list[str] = []
        with netlink.host_session() as links, netlink.translated("pruning the node mesh"):
            index = links.ifindex(self.ifname)
            if self.l2 and index is not None:
                links.delete_link(index)
                changed.append(f"device {self.ifname}")
                index = None
            for name in self.stale_links:
                if links.delete_link_named(name):
                    changed.append(f"device {name}")
            held = list(self._held(links, index))
            for what, delete in held:
                theirs = what[0] == "route" and what[1] in foreign
                if what not in want and not theirs and delete():
                    changed.append(" ".join(map(str, what)))
        missing = want - {what for what, _ in held}
        for remote in keep:
            if _wanted(self, [remote]) & missing:
                self.program(local, remote)
                changed.append(f"restored node {remote.name}")
        return changed

    def _held(self, links: Session, index: int | None) -> Iterator[tuple[tuple[Any, ...], Deleter]]:
        """(description, deleter) for every mesh object in the kernel."""
        for family in (socket.AF_INET, socket.AF_INET6):
            for route in links.routes(family, RTPROT_MESH):
                yield ("route", route.dst, route.gateway), _route_deleter(
                    links, route.dst, route.oif, route.gateway)
        for neigh in links.neighbors():
            ours = neigh.index == index or _is_link_local_hop(neigh.dst)
            if neigh.family not in (socket.AF_INET, socket.AF_INET6) or not ours:
                continue
            if not neigh.state & NUD_PERMANENT:
                continue
            yield ("neigh", neigh.dst, neigh.mac), partial(
                links.delete_neighbor, neigh.index, neigh.dst)
        if index is None:
            return
        for entry in links.fdb(index):
            yield ("fdb", entry.mac, entry.dst), partial(
                links.delete_fdb, index, entry.mac, entry.dst)


def find_uplink(local: NodeInfo) -> Uplink | None:
    """The interface holding the node IP, or None when no interface holds it."""
    with netlink.host_session() as links, netlink.translated("finding the uplink"):
        index = links.index_with_address(local.node_ip)
        if index is None:
            return None
        link = links.link(index)
        return Uplink(index, link.name, link.mtu, link.mac)


def check_fits(pod_mtu: int, local: NodeInfo, overhead: int, how: str) -> None:
    """Raises InvalidConfig when a pod's full-size packet plus `overhead` (the mesh's
    encapsulation, `how`) does not fit the uplink; nothing to check without one."""
    up = find_uplink(local)
    if up is None:
        return
    room = up.mtu - overhead
    if pod_mtu > room:
        raise InvalidConfig(
            f"MTUSize {pod_mtu} does not fit the uplink {up.name} (MTU {up.mtu}) over {how}",
            f"set MTUSize to at most {room}, or raise the uplink's MTU",
        )


def _is_link_local_hop(ip: str) -> bool:
    return ":" in ip and ipaddress.IPv6Address(ip) in LINK_LOCALS


def _wanted(mesh: KernelMesh, keep: Collection[NodeInfo]) -> set[tuple[Any, ...]]:
    want: set[tuple[Any, ...]] = set()
    for remote in keep:
        ll = link_local(remote.node_id)
        if mesh.l2:
            for subnet in mesh.routed_subnets(remote):
                same = (ipaddress.ip_network(subnet).version
                        == ipaddress.ip_address(remote.node_ip).version)
                want.add(("route", subnet, remote.node_ip if same else ll))
                if not same:  # the next hop of the other family's routes (_program_l2)
                    want.add(("neigh", ll, remote.uplink_mac))
            continue
        want.add(("fdb", remote.vxlan_mac, remote.node_ip))
        want.add(("neigh", remote.vxlan_ip, remote.vxlan_mac))
        want.add(("neigh", ll, remote.vxlan_mac))
        for subnet in remote.pod_subnets:
            want.add(("route", subnet, mesh._vxlan_gateway(remote, subnet)))
        want.add(("route", host_prefix(remote.vxlan_ip), None))
    return want


def host_prefix(ip: str) -> str:
    """`ip` as a one-address prefix, as the kernel dumps it."""
    address = ipaddress.ip_address(ip)
    return f"{address}/{address.max_prefixlen}"


def _route_deleter(links: Session, dst: str, oif: int | None, gateway: str | None) -> Deleter:
    # The kernel deletes only a route of the scope asked for (default: universe).
    return partial(links.delete_route, dst, oif, gateway, RTPROT_MESH,
                   scope=None if gateway else RT_SCOPE_LINK)


def _delete(links: Session, what: tuple[Any, ...], index: int) -> Deleter:
    """The deleter of one object as `_wanted` describes it, on interface `index`; it returns
    False when the object was gone already."""
    kind, first, second = what
    if kind == "route":
        return _route_deleter(links, first, index, second)
    if kind == "neigh":
        return partial(links.delete_neighbor, index, first)
    return partial(links.delete_fdb, index, first, second)


__all__ = ["RTPROT_MESH", "KernelMesh", "Uplink", "check_fits", "find_uplink", "host_prefix",
           "vxlan_mac"]

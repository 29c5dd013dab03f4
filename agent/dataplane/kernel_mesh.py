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

import errno
import ipaddress
import socket
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyroute2 import IPRoute, NetlinkError

from agent.linux import netlink
from agent.model.errors import DataplaneFailure, InvalidConfig
from agent.model.node import VXLAN_OVERHEAD, NodeInfo, link_local, vxlan_mac

RTPROT_MESH = 118  # the protocol number on our routes (iproute2: "proto 118")
RTNH_F_ONLINK = 4
RT_SCOPE_LINK = 253
NUD_PERMANENT = 0x80
NUD_NOARP = 0x40
NTF_SELF = 0x02
LINK_LOCALS = ipaddress.IPv6Network("fe80::2b:0:0/96")  # node.link_local(ID) for every ID


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
    ) -> None:
        self.pod_mtu = pod_mtu
        self.route_vpp_host = route_vpp_host and l2_interconnect
        self.ifname = ifname
        self.vni = vni
        self.port = port
        self.l2 = l2_interconnect
        self._lock = threading.Lock()  # device creation vs. concurrent program calls
        self._cache: tuple[Uplink, int | None] | None = None

    # ---- node-wide --------------------------------------------------------------------------

    def uplink(self, local: NodeInfo) -> Uplink | None:
        """The interface holding the node IP, or None when no interface holds it."""
        family = socket.AF_INET6 if ":" in local.node_ip else socket.AF_INET
        with netlink.host_ns() as ipr, netlink.translated("finding the uplink"):
            for addr in ipr.get_addr(family=family):
                # IFA_LOCAL is the own address (IFA_ADDRESS: the peer's, on point-to-point)
                if (addr.get_attr("IFA_LOCAL") or addr.get_attr("IFA_ADDRESS")) == local.node_ip:
                    link = ipr.link("get", index=addr["index"])[0]
                    return Uplink(
                        int(addr["index"]),
                        str(link.get_attr("IFLA_IFNAME")),
                        int(link.get_attr("IFLA_MTU")),
                        str(link.get_attr("IFLA_ADDRESS")),
                    )
        return None

    def overhead(self, local: NodeInfo) -> int:
        return 0 if self.l2 else VXLAN_OVERHEAD[ipaddress.ip_address(local.node_ip).version]

    def check_mtu(self, local: NodeInfo) -> None:
        """Raises InvalidConfig when pods' full-size packets would not fit the uplink."""
        up = self.uplink(local)
        if up is None:
            return
        room = up.mtu - self.overhead(local)
        if self.pod_mtu > room:
            how = "the L2 interconnect" if self.l2 else f"VXLAN ({self.overhead(local)} bytes)"
            raise InvalidConfig(
                f"MTUSize {self.pod_mtu} does not fit the uplink {up.name} (MTU {up.mtu}) "
                f"over {how}",
                f"set MTUSize to at most {room}, or raise the uplink's MTU",
            )

    def _device(self, ipr: IPRoute, local: NodeInfo, up: Uplink) -> int:
        """The VXLAN device's index, created (or re-created when its settings differ)."""
        index = netlink.ifindex(ipr, self.ifname)
        if index is not None and not self._device_matches(ipr, index, local):
            ipr.link("del", index=index)
            index = None
        if index is None:
            v6 = ":" in local.node_ip
            ipr.link(
                "add", ifname=self.ifname, kind="vxlan", vxlan_id=self.vni,
                vxlan_port=self.port, vxlan_learning=0, vxlan_link=up.index,
                **({"vxlan_local6": local.node_ip} if v6 else {"vxlan_local": local.node_ip}),
            )
            index = netlink.ifindex(ipr, self.ifname)
            assert index is not None
        self._settle(ipr, index, local.vxlan_mac, up.mtu - self.overhead(local))
        netlink.add_address(ipr, index, ipaddress.ip_interface(f"{local.vxlan_ip}/32"))
        return index

    @staticmethod
    def _settle(ipr: IPRoute, index: int, mac: str, mtu: int) -> None:
        """MAC, MTU and up, each set only when it differs: setting a MAC (even the same one)
        makes the kernel flush every neighbor of the device, our permanent ones included."""
        link = ipr.link("get", index=index)[0]
        change: dict[str, object] = {}
        if str(link.get_attr("IFLA_ADDRESS")).lower() != mac:
            change["address"] = mac
        if link.get_attr("IFLA_MTU") != mtu:
            change["mtu"] = mtu
        if not link["flags"] & 1:  # IFF_UP
            change["state"] = "up"
        if change:
            ipr.link("set", index=index, **change)

    def _device_matches(self, ipr: IPRoute, index: int, local: NodeInfo) -> bool:
        link = ipr.link("get", index=index)[0]
        info = link.get_attr("IFLA_LINKINFO")
        if info is None or info.get_attr("IFLA_INFO_KIND") != "vxlan":
            return False
        data = info.get_attr("IFLA_INFO_DATA")
        local_ip = data.get_attr("IFLA_VXLAN_LOCAL") or data.get_attr("IFLA_VXLAN_LOCAL6")
        return bool(
            data.get_attr("IFLA_VXLAN_ID") == self.vni
            and data.get_attr("IFLA_VXLAN_PORT") == self.port
            and local_ip == local.node_ip
        )

    # ---- per remote node --------------------------------------------------------------------

    def program(self, local: NodeInfo, remote: NodeInfo) -> None:
        """Makes the state for `remote` present (replace semantics: idempotent)."""
        with self._programming(local) as (ipr, up, index):
            if self.l2:
                self._program_l2(ipr, up, remote)
                return
            assert index is not None
            ipr.fdb("replace", ifindex=index, lladdr=remote.vxlan_mac, dst=remote.node_ip,
                    state=NUD_PERMANENT | NUD_NOARP, flags=NTF_SELF)
            self._neigh(ipr, index, remote.vxlan_ip, remote.vxlan_mac)
            self._neigh(ipr, index, link_local(remote.node_id), remote.vxlan_mac)
            for subnet in remote.pod_subnets:
                self._route(ipr, index, subnet, self._vxlan_gateway(remote, subnet))
            self._route(ipr, index, _host_prefix(remote.vxlan_ip), None)

    def routed_subnets(self, remote: NodeInfo) -> tuple[str, ...]:
        """The remote subnets the L2 interconnect routes via the remote node."""
        extra = (remote.vpp_host_subnet,) if self.route_vpp_host else ()
        return (*remote.pod_subnets, *extra)

    def _program_l2(self, ipr: IPRoute, up: Uplink, remote: NodeInfo) -> None:
        for subnet in self.routed_subnets(remote):
            if ipaddress.ip_network(subnet).version == ipaddress.ip_address(remote.node_ip).version:
                self._route(ipr, up.index, subnet, remote.node_ip)
                continue
            if not remote.uplink_mac:
                raise DataplaneFailure(f"node {remote.name} published no uplink MAC")
            self._neigh(ipr, up.index, link_local(remote.node_id), remote.uplink_mac)
            self._route(ipr, up.index, subnet, link_local(remote.node_id))

    @staticmethod
    def _vxlan_gateway(remote: NodeInfo, subnet: str) -> str:
        v6 = ipaddress.ip_network(subnet).version == 6
        return link_local(remote.node_id) if v6 else remote.vxlan_ip

    @contextmanager
    def _programming(
        self, local: NodeInfo
    ) -> Iterator[tuple[IPRoute, Uplink, int | None]]:
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
                    with netlink.host_ns() as ipr, netlink.translated("making the VXLAN device"):
                        index = self._device(ipr, local, up)
                cached = self._cache = (up, index)
        try:
            with netlink.host_ns() as ipr, netlink.translated("programming the node mesh"):
                yield ipr, cached[0], cached[1]
        except BaseException:
            self._cache = None
            raise

    @staticmethod
    def _neigh(ipr: IPRoute, index: int, ip: str, mac: str) -> None:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        ipr.neigh("replace", ifindex=index, dst=ip, lladdr=mac, state=NUD_PERMANENT,
                  family=family)

    @staticmethod
    def _route(ipr: IPRoute, index: int, dst: str, gateway: str | None) -> None:
        """A mesh route to `dst` via `gateway` (onlink), or on the link when None."""
        hop: dict[str, Any] = ({"gateway": gateway, "flags": RTNH_F_ONLINK} if gateway
                               else {"scope": RT_SCOPE_LINK})
        ipr.route("replace", dst=dst, oif=index, proto=RTPROT_MESH, **hop)

    def unprogram(
        self, local: NodeInfo, remote: NodeInfo, keep: Collection[NodeInfo] = ()
    ) -> list[str]:
        """Removes the state of `remote` that no node in `keep` needs; gone already is fine.
        Deletes exactly those objects (no dump: one removal among 1000 nodes stays cheap)."""
        gone = _wanted(self, [remote]) - _wanted(self, keep)
        up = self.uplink(local)
        removed: list[str] = []
        with netlink.host_ns() as ipr, netlink.translated("removing a node from the mesh"):
            index = up.index if self.l2 and up else netlink.ifindex(ipr, self.ifname)
            if index is None:
                return removed
            for what in sorted(gone):
                if _ignore_gone(_delete(ipr, what, index)):
                    removed.append(" ".join(map(str, what)))
        return removed

    def prune(self, local: NodeInfo, keep: Collection[NodeInfo]) -> list[str]:
        """Makes the kernel hold exactly what the nodes in `keep` need: removes what none of
        them explains (nodes removed while this agent was down, leftovers of a changed config)
        and programs again the nodes whose objects went missing (a device or route deleted
        behind the agent's back). Returns what it changed."""
        self._cache = None  # check uplink and device again on the next program()
        want = _wanted(self, keep)
        changed: list[str] = []
        with netlink.host_ns() as ipr, netlink.translated("pruning the node mesh"):
            index = netlink.ifindex(ipr, self.ifname)
            if self.l2 and index is not None:
                ipr.link("del", index=index)
                changed.append(f"device {self.ifname}")
                index = None
            held = list(self._held(ipr, index))
            for what, delete in held:
                if what not in want and _ignore_gone(delete):
                    changed.append(" ".join(map(str, what)))
        missing = want - {what for what, _ in held}
        for remote in keep:
            if _wanted(self, [remote]) & missing:
                self.program(local, remote)
                changed.append(f"restored node {remote.name}")
        return changed

    def _held(self, ipr: IPRoute, index: int | None) -> Iterator[tuple[tuple[Any, ...], Any]]:
        """(description, deleter) for every mesh object in the kernel."""
        for family in (socket.AF_INET, socket.AF_INET6):
            for route in ipr.route("dump", family=family, proto=RTPROT_MESH):
                dst = f"{route.get_attr('RTA_DST')}/{route['dst_len']}"
                gw = route.get_attr("RTA_GATEWAY")
                oif = route.get_attr("RTA_OIF")
                yield ("route", dst, gw), _route_deleter(ipr, dst, gw, oif)
        for neigh in ipr.neigh("dump"):
            ip = str(neigh.get_attr("NDA_DST"))
            ours = neigh["ifindex"] == index or _is_link_local_hop(ip)
            if neigh["family"] not in (socket.AF_INET, socket.AF_INET6) or not ours:
                continue
            if not neigh["state"] & NUD_PERMANENT:
                continue
            mac = str(neigh.get_attr("NDA_LLADDR"))
            yield ("neigh", ip, mac), _deleter(ipr.neigh, "del", ifindex=neigh["ifindex"],
                                               dst=ip, family=neigh["family"])
        if index is None:
            return
        for entry in ipr.fdb("dump", ifindex=index):
            dst = entry.get_attr("NDA_DST")
            if dst is None or entry["ifindex"] != index:
                continue
            mac = str(entry.get_attr("NDA_LLADDR"))
            yield ("fdb", mac, str(dst)), _deleter(
                ipr.fdb, "del", ifindex=index, lladdr=mac, dst=str(dst))


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
            want.add(("neigh", ll, remote.uplink_mac))
            continue
        want.add(("fdb", remote.vxlan_mac, remote.node_ip))
        want.add(("neigh", remote.vxlan_ip, remote.vxlan_mac))
        want.add(("neigh", ll, remote.vxlan_mac))
        for subnet in remote.pod_subnets:
            want.add(("route", subnet, mesh._vxlan_gateway(remote, subnet)))
        want.add(("route", _host_prefix(remote.vxlan_ip), None))
    return want


def _host_prefix(ip: str) -> str:
    """`ip` as a one-address prefix, as the kernel dumps it."""
    address = ipaddress.ip_address(ip)
    return f"{address}/{address.max_prefixlen}"


def _route_deleter(ipr: IPRoute, dst: str, gateway: str | None, oif: int) -> Any:
    # The kernel deletes only a route of the scope asked for (pyroute2's default: universe).
    hop = {"gateway": gateway} if gateway else {"scope": RT_SCOPE_LINK}
    return _deleter(ipr.route, "del", dst=dst, oif=oif, proto=RTPROT_MESH, **hop)


def _deleter(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return lambda: fn(*args, **kwargs)


def _delete(ipr: IPRoute, what: tuple[Any, ...], index: int) -> Any:
    """The deleter of one object as `_wanted` describes it, on interface `index`."""
    kind, first, second = what
    if kind == "route":
        return _route_deleter(ipr, first, second, index)
    if kind == "neigh":
        family = socket.AF_INET6 if ":" in first else socket.AF_INET
        return _deleter(ipr.neigh, "del", ifindex=index, dst=first, family=family)
    return _deleter(ipr.fdb, "del", ifindex=index, lladdr=first, dst=second)


def _ignore_gone(delete: Any) -> bool:
    """Runs a deleter; False when the object was gone already."""
    try:
        delete()
    except NetlinkError as exc:
        if exc.code not in (errno.ESRCH, errno.ENOENT, errno.ENODEV):
            raise
        return False
    return True


__all__ = ["RTPROT_MESH", "KernelMesh", "Uplink", "vxlan_mac"]

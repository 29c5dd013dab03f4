"""pyroute2 for the slow paths, behind methods named by what they do.

Start-up (the kernel dataplane's gateway link, the VPP host interconnect), the node mesh (the VXLAN
device, FDB entries, permanent neighbors, onlink routes of our protocol) and undoing a pod side
change a few objects each, rarely: pyroute2's full messages are fine there, and a request it
builds is one we need not encode. The hot path of an ADD and the checks speak raw rtnetlink
instead (agent/linux/nlwrite, agent/linux/nlread). Outside agent/linux nothing imports pyroute2
(an import-linter contract in pyproject.toml): the dataplane gets a `Session` and calls these
methods.

A session is one pyroute2 `IPRoute` (which must stay in the thread that made it, and is made at
the first request that needs it) in the calling thread's namespace (`Session.host`) or in a
pod's (`Session.pod`: its socket made inside by agent/linux/netns; pyroute2's own
`IPRoute(netns=...)` forks a helper process).
Methods raise pyroute2's NetlinkError or OSError: callers wrap a block of them in
agent.linux.netlink.translated, the one place they become our errors. A delete of something
already gone returns False instead.

Dumps (routes, neighbors, FDB) and link lookups are read raw (agent/linux/nlread) on a socket of
the session's namespace, not through pyroute2: pyroute2's parsed messages are reference cycles,
and a dump takes long enough for them to reach the collector's oldest generation, where they
stay until a full collection. The node mesh's prune dumps the node's whole route and neighbor
tables every resync (30 s); through pyroute2 that left ~33,000 objects each time (a node with
~600 routes and ~230 neighbors), which grew Python's allocator arenas and the agent's RSS in the
soak (docs/soak.md).
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyroute2 import IPRoute, NetlinkError

from agent.linux import nlcodec as nl
from agent.linux import nlread
from agent.linux.netns import PodNetns
from agent.model.pod import IPInterface

# what a delete meets when its object is gone already (a route ESRCH, a neighbor or FDB entry
# ENOENT, a link ENODEV, an address EADDRNOTAVAIL)
_GONE = (errno.ENOENT, errno.ESRCH, errno.ENODEV, errno.EADDRNOTAVAIL)


@dataclass(frozen=True)
class LinkState:
    index: int
    name: str
    mtu: int
    mac: str
    up: bool


@dataclass(frozen=True)
class Vxlan:
    """A VXLAN device's settings that decide whether it can be kept."""

    vni: int
    port: int
    local: str  # local IPv4 or IPv6 address


@dataclass(frozen=True)
class RouteEntry:
    dst: str  # "<address>/<prefix length>"
    gateway: str | None
    oif: int | None


@dataclass(frozen=True)
class NeighborEntry:
    family: int
    index: int
    dst: str
    mac: str
    state: int


@dataclass(frozen=True)
class FdbEntry:
    index: int
    mac: str
    dst: str


def _family(ip: str) -> int:
    return socket.AF_INET6 if ":" in ip else socket.AF_INET


def _ignore_gone(call: Any, *args: Any, **kwargs: Any) -> bool:
    """Runs a pyroute2 delete; False when its object was gone already."""
    try:
        call(*args, **kwargs)
    except NetlinkError as exc:
        if exc.code not in _GONE:
            raise
        return False
    return True


class Session:
    """Requests in one namespace, from the thread that made the session (pyroute2's `IPRoute`
    for changes, raw reads for dumps); a context manager that closes it."""

    def __init__(self, netns: PodNetns | None = None) -> None:
        # pyroute2's session and the raw reader are made on first use, with sockets in the
        # session's namespace: a session that only reads (a prune with nothing to remove) never
        # builds an IPRoute, itself a few reference cycles.
        self._netns = netns  # a pod's namespace, held open with the session; None: the caller's
        self._ipr: IPRoute | None = None
        self._sock: socket.socket | None = None  # pyroute2's socket in a pod namespace
        self._reader: nlread.Reader | None = None

    @classmethod
    def host(cls) -> Session:
        """A session in the calling thread's namespace (the node's)."""
        return cls()

    @classmethod
    def pod(cls, netns_path: str) -> Session:
        """A session inside the pod namespace at `netns_path` (opened here, once: a missing one
        raises now, not at the first request)."""
        return cls(PodNetns.open(netns_path))

    @property
    def ipr(self) -> IPRoute:
        """The pyroute2 session, made on first use (it must stay in the thread that made it)."""
        if self._ipr is None:
            if self._netns is None:
                self._ipr = IPRoute()
            else:
                self._sock = self._netns.socket(socket.AF_NETLINK, socket.SOCK_DGRAM)
                self._ipr = IPRoute(use_socket=self._sock)
        return self._ipr

    def close(self) -> None:
        if self._ipr is not None:
            self._ipr.close()
            self._ipr = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._netns is not None:
            self._netns.close()  # and the reader's socket, the namespace's route socket
        elif self._reader is not None:
            self._reader.sock.close()
        self._reader = None

    def _read(self) -> nlread.Reader:
        """The raw reader of the dumps (module docstring: why not pyroute2)."""
        if self._reader is None:
            self._reader = nlread.Reader(_host_socket() if self._netns is None
                                         else self._netns.route_socket())
        return self._reader

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- links --------------------------------------------------------------------------

    def ifindex(self, name: str) -> int | None:
        """The index of link `name`, or None when there is no such link."""
        link = self._read().link(name)
        return None if link is None else link.index

    def link(self, index: int) -> LinkState:
        msg = self.ipr.link("get", index=index)[0]
        return LinkState(index, str(msg.get_attr("IFLA_IFNAME")), int(msg.get_attr("IFLA_MTU")),
                         str(msg.get_attr("IFLA_ADDRESS")), bool(msg["flags"] & nl.IFF_UP))

    def vxlan(self, index: int) -> Vxlan | None:
        """The VXLAN settings of link `index`; None when it is no VXLAN device."""
        info = self.ipr.link("get", index=index)[0].get_attr("IFLA_LINKINFO")
        if info is None or info.get_attr("IFLA_INFO_KIND") != "vxlan":
            return None
        data = info.get_attr("IFLA_INFO_DATA")
        local = data.get_attr("IFLA_VXLAN_LOCAL") or data.get_attr("IFLA_VXLAN_LOCAL6")
        return Vxlan(data.get_attr("IFLA_VXLAN_ID"), data.get_attr("IFLA_VXLAN_PORT"),
                     str(local))

    def add_dummy(self, name: str) -> int:
        """Adds a dummy link (an ifb on kernels built without the dummy driver: it behaves
        the same for a link that only holds addresses); returns its index."""
        try:
            self.ipr.link("add", ifname=name, kind="dummy")
        except NetlinkError as exc:
            if exc.code != errno.EOPNOTSUPP:
                raise
            self.ipr.link("add", ifname=name, kind="ifb")
        return self._index(name)

    def add_vxlan(self, name: str, vxlan: Vxlan, uplink: int) -> int:
        """Adds a VXLAN device without learning (the FDB is ours) on `uplink`; its index."""
        local = {"vxlan_local6" if ":" in vxlan.local else "vxlan_local": vxlan.local}
        self.ipr.link("add", ifname=name, kind="vxlan", vxlan_id=vxlan.vni,
                      vxlan_port=vxlan.port, vxlan_learning=0, vxlan_link=uplink, **local)
        return self._index(name)

    def add_wireguard(self, name: str) -> int:
        """Adds a kernel WireGuard device; its index. NetlinkError EOPNOTSUPP where the kernel
        has no WireGuard (agent/linux/wireguard then runs wireguard-go)."""
        self.ipr.link("add", ifname=name, kind="wireguard")
        return self._index(name)

    def link_kind(self, index: int) -> str:
        """The link's IFLA_INFO_KIND ("vxlan", "wireguard", "tun", ...; "" when it has none)."""
        info = self.ipr.link("get", index=index)[0].get_attr("IFLA_LINKINFO")
        return "" if info is None else str(info.get_attr("IFLA_INFO_KIND") or "")

    def add_veth(self, name: str, peer: str, mtu: int, mac: str) -> None:
        """Adds a veth pair in this namespace, this end with `mac`, both ends with `mtu`."""
        self.ipr.link("add", ifname=name, kind="veth", mtu=mtu, address=mac,
                      peer={"ifname": peer, "mtu": mtu})

    def set_link(self, index: int, up: bool | None = None, mtu: int | None = None,
                 mac: str | None = None, alias: str | None = None) -> None:
        """Changes what is given of link `index` (None: left as it is)."""
        state = None if up is None else ("up" if up else "down")
        self.ipr.link("set", index=index, state=state, mtu=mtu, address=mac, ifalias=alias)

    def delete_link(self, index: int) -> None:
        self.ipr.link("del", index=index)

    def delete_link_named(self, name: str) -> bool:
        """Deletes link `name`; False when there is none."""
        return _ignore_gone(self.ipr.link, "del", ifname=name)

    def _index(self, name: str) -> int:
        index = self.ifindex(name)
        assert index is not None, f"link {name} gone right after it was added"
        return index

    # ---- addresses ----------------------------------------------------------------------

    def add_address(self, index: int, iface: IPInterface, nodad: bool = True) -> None:
        """Adds an address; one already in place is fine (retries and restarts find it).

        IPv6 addresses skip duplicate address detection unless told (`nodad`): they are usable
        at once, and IPAM already guarantees uniqueness."""
        flags = nl.IFA_F_NODAD if nodad and iface.version == 6 else 0
        try:
            self.ipr.addr("add", index=index, address=str(iface.ip),
                          prefixlen=iface.network.prefixlen, flags=flags)
        except NetlinkError as exc:
            if exc.code != errno.EEXIST:
                raise

    def delete_address(self, index: int, iface: IPInterface) -> bool:
        return _ignore_gone(self.ipr.addr, "del", index=index, address=str(iface.ip),
                            prefixlen=iface.network.prefixlen)

    def index_with_address(self, ip: str) -> int | None:
        """The link holding address `ip`, or None. IFA_LOCAL is a link's own address
        (IFA_ADDRESS is the peer's on a point-to-point link, and the own one elsewhere)."""
        for addr in self.ipr.get_addr(family=_family(ip)):
            if (addr.get_attr("IFA_LOCAL") or addr.get_attr("IFA_ADDRESS")) == ip:
                return int(addr["index"])
        return None

    # ---- neighbors and FDB --------------------------------------------------------------

    def replace_neighbor(self, index: int, ip: str, mac: str) -> None:
        """A permanent neighbor entry ("replace" also turns one the kernel learnt, or failed
        to learn, into ours)."""
        self.ipr.neigh("replace", ifindex=index, dst=ip, lladdr=mac, state=nl.NUD_PERMANENT,
                       family=_family(ip))

    def delete_neighbor(self, index: int, ip: str) -> bool:
        return _ignore_gone(self.ipr.neigh, "del", ifindex=index, dst=ip, family=_family(ip))

    def neighbors(self) -> list[NeighborEntry]:
        """The IPv4 and IPv6 neighbors of every link (no bridge FDB entries)."""
        return [NeighborEntry(int(family), n.index, str(n.dst), str(n.lladdr), n.state)
                for family in (socket.AF_INET, socket.AF_INET6)
                for n in self._read().neighbors(family)]

    def replace_fdb(self, index: int, mac: str, dst: str) -> None:
        """A permanent FDB entry on the device itself (NTF_SELF): `mac` is behind `dst`."""
        self.ipr.fdb("replace", ifindex=index, lladdr=mac, dst=dst,
                     state=nl.NUD_PERMANENT | nl.NUD_NOARP, flags=nl.NTF_SELF)

    def delete_fdb(self, index: int, mac: str, dst: str) -> bool:
        return _ignore_gone(self.ipr.fdb, "del", ifindex=index, lladdr=mac, dst=dst)

    def fdb(self, index: int) -> list[FdbEntry]:
        """The FDB entries of device `index` that have a destination."""
        return [FdbEntry(index, str(e.lladdr), str(e.dst))
                for e in self._read().neighbors(socket.AF_BRIDGE)
                if e.dst is not None and e.index == index]

    # ---- routes -------------------------------------------------------------------------

    def replace_route(self, dst: str, gateway: str | None, oif: int, onlink: bool = False,
                      proto: int | None = None, mtu: int | None = None) -> None:
        """A route to `dst` via `gateway` on link `oif`, or on the link itself (scope link)
        when `gateway` is None; `onlink`: the gateway is taken as reachable on the link
        whatever its addresses; `mtu`: the route's own MTU metric."""
        hop: dict[str, Any] = ({"gateway": gateway,
                                "flags": nl.RTNH_F_ONLINK if onlink else None}
                               if gateway else {"scope": nl.RT_SCOPE_LINK})
        self.ipr.route("replace", dst=dst, oif=oif, proto=proto,
                       metrics=None if mtu is None else {"mtu": mtu}, **hop)

    def delete_route(self, dst: str, oif: int | None, gateway: str | None = None,
                     proto: int | None = None, family: int | None = None,
                     scope: int | None = None) -> bool:
        """Deletes a route; the kernel deletes only one of the `scope` asked for (none given:
        universe), so a link-scope route needs `scope=nl.RT_SCOPE_LINK`."""
        return _ignore_gone(self.ipr.route, "del", dst=dst, oif=oif, gateway=gateway,
                            proto=proto, family=family, scope=scope)

    def routes(self, family: int, proto: int) -> list[RouteEntry]:
        """The routes of `family` with protocol number `proto`."""
        return [RouteEntry(f"{r.dst}/{r.dst_len}",
                           None if r.gateway is None else str(r.gateway), r.oif)
                for r in self._read().routes(family) if r.protocol == proto]


def _host_socket() -> socket.socket:
    return socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE)



@contextmanager
def host_ns() -> Iterator[IPRoute]:
    """A bare IPRoute in the calling thread's namespace, for tests that check with pyroute2's
    own API what the agent did."""
    with Session.host() as session:
        yield session.ipr


@contextmanager
def pod_ns(netns_path: str) -> Iterator[IPRoute]:
    """A bare IPRoute inside the pod namespace at `netns_path` (never created if missing;
    InvalidEnvironment when it is no pod's), for tests as `host_ns`."""
    with Session.pod(netns_path) as session:
        yield session.ipr

"""Raw netlink reads for the checks: links, addresses, neighbors and routes as small records
(and the plain requests and dumps the conntrack sweep makes on a NETLINK_NETFILTER socket).

The checks (CHECK, reconcile after a restart, /v1/pods inspection) only compare a handful of
attributes with a pod record. Building pyroute2's full message objects cost about 1 ms per request
(a reconcile of 250 pods spent most of its time there), so the checks read the kernel's answers
here: one request on a NETLINK_ROUTE socket the caller made (in the pod namespace or the node's),
the fixed headers and the few attributes compared unpacked with agent/linux/nlcodec, nothing else.
A refused request raises OSError with the kernel's errno (callers wrap it in
agent.linux.netlink.translated); a dump the kernel marks as interrupted (the table changed while
it was read) is read again.
"""

from __future__ import annotations

import errno
import os
import socket
from dataclasses import dataclass

from agent.linux import nlcodec as nl
from agent.linux.nlcodec import IPAddress

Message = tuple[int, bytes, int]  # type, the whole message, offset of its body
_DUMP_TRIES = 5
_BUFSIZE = 1 << 16


@dataclass(frozen=True)
class Link:
    index: int
    name: str
    flags: int
    mtu: int | None
    mac: str
    operstate: str
    alias: str | None


@dataclass(frozen=True)
class Address:
    index: int
    address: IPAddress
    prefixlen: int


@dataclass(frozen=True)
class Neighbor:
    index: int
    dst: IPAddress | None
    lladdr: str | None
    state: int


@dataclass(frozen=True)
class Route:
    table: int
    dst_len: int
    dst: IPAddress | None
    gateway: IPAddress | None
    oif: int | None
    priority: int
    kind: int  # rtm_type: RTN_UNICAST 1, RTN_LOCAL 2, RTN_BLACKHOLE 6, ...
    protocol: int = 0  # rtm_protocol: who made it (RTPROT_KERNEL 2, RTPROT_BOOT 3, ours, ...)


class Reader:
    """Requests on one NETLINK_ROUTE socket (not thread-safe: one reader per thread)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._seq = 0

    def _request(self, kind: int, flags: int, body: bytes) -> tuple[list[Message], bool]:
        """Sends one request; returns every answer as (type, message, body offset), and whether
        the kernel flagged the dump as interrupted (the table changed while it was read)."""
        self._seq += 1
        seq = self._seq
        self.sock.send(nl.message(kind, nl.NLM_F_REQUEST | flags, seq, body))
        out: list[Message] = []
        interrupted = False
        while True:
            data = self.sock.recv(_BUFSIZE)
            for offset, length, mtype, mflags, mseq in nl.messages(data):
                if mseq != seq:
                    continue  # a late answer to an earlier request
                interrupted |= bool(mflags & nl.NLM_F_DUMP_INTR)
                if mtype == nl.NLMSG_ERROR:
                    code = nl.error_code(data, offset)
                    if code:
                        raise OSError(code, os.strerror(code))
                    return out, interrupted
                if mtype == nl.NLMSG_DONE:
                    return out, interrupted
                out.append((mtype, data[offset : offset + length], nl.NLMSGHDR.size))
                if not mflags & nl.NLM_F_MULTI:
                    return out, interrupted

    def request(self, kind: int, body: bytes) -> None:
        """One request the kernel acknowledges (a conntrack entry's delete); OSError with the
        kernel's errno when it refuses."""
        self._request(kind, nl.NLM_F_ACK, body)

    def dump(self, kind: int, body: bytes) -> list[Message]:
        """Every answer of a dump request (read again when the kernel marks it interrupted)."""
        for _ in range(_DUMP_TRIES):
            found, interrupted = self._request(kind, nl.NLM_F_DUMP, body)
            if not interrupted:
                break
        return found  # interrupted every time: the last one is as good as any

    def link(self, name: str) -> Link | None:
        """The link named `name`, or None when there is none."""
        body = nl.IFINFOMSG.pack(0, 0, 0, 0, 0) + nl.attr_str(nl.IFLA_IFNAME, name)
        try:
            found, _ = self._request(nl.RTM_GETLINK, 0, body)
        except OSError as exc:
            if exc.errno == errno.ENODEV:
                return None
            raise
        return next((_link(m, o) for t, m, o in found if t == nl.RTM_NEWLINK), None)

    def route_to(self, address: IPAddress) -> Route | None:
        """The route the kernel picks for traffic to `address` (`ip route get`); OSError
        (ENETUNREACH, EACCES, ...) when there is none."""
        family, raw = nl.ip_bytes(address)
        body = nl.RTMSG.pack(family, address.max_prefixlen, 0, 0, 0, 0, 0, 0, 0)
        found, _ = self._request(nl.RTM_GETROUTE, 0, body + nl.attr(nl.RTA_DST, raw))
        routes = [_route(m, o) for t, m, o in found if t == nl.RTM_NEWROUTE]
        return routes[0] if routes else None

    def links(self) -> list[Link]:
        body = nl.IFINFOMSG.pack(0, 0, 0, 0, 0)
        return [_link(m, o) for t, m, o in self.dump(nl.RTM_GETLINK, body)
                if t == nl.RTM_NEWLINK]

    def addresses(self) -> list[Address]:
        out = []
        for t, m, o in self.dump(nl.RTM_GETADDR, nl.IFADDRMSG.pack(0, 0, 0, 0, 0)):
            _, plen, _, _, index = nl.IFADDRMSG.unpack_from(m, o)
            ip = nl.ip_of(nl.attrs(m, o + nl.IFADDRMSG.size, len(m)).get(nl.IFA_ADDRESS))
            if t == nl.RTM_NEWADDR and ip is not None:
                out.append(Address(index, ip, plen))
        return out

    def neighbors(self, family: int) -> list[Neighbor]:
        out = []
        for t, m, o in self.dump(nl.RTM_GETNEIGH, nl.NDMSG.pack(family, 0, 0, 0, 0)):
            _, index, state, _, _ = nl.NDMSG.unpack_from(m, o)
            attrs = nl.attrs(m, o + nl.NDMSG.size, len(m))
            lladdr = attrs.get(nl.NDA_LLADDR)
            if t == nl.RTM_NEWNEIGH:
                out.append(Neighbor(index, nl.ip_of(attrs.get(nl.NDA_DST)),
                                    None if lladdr is None else nl.mac_text(lladdr), state))
        return out

    def routes(self, family: int, table: int | None = None) -> list[Route]:
        """Every route of `family` (0: all), or those of routing table `table` only."""
        body = nl.RTMSG.pack(family, 0, 0, 0, 0, 0, 0, 0, 0)
        compat = (table, nl.RT_TABLE_COMPAT)
        found = [
            _route(m, o)
            for t, m, o in self.dump(nl.RTM_GETROUTE, body)
            # rtm_table is the table unless the ID needs more than 8 bits (then RTA_TABLE):
            # others are skipped before their attributes are read
            if t == nl.RTM_NEWROUTE and (table is None or m[o + 4] in compat)
        ]
        return found if table is None else [r for r in found if r.table == table]


def _route(message: bytes, offset: int) -> Route:
    _, dst_len, _, _, table, protocol, _, kind, _ = nl.RTMSG.unpack_from(message, offset)
    attrs = nl.attrs(message, offset + nl.RTMSG.size, len(message))
    return Route(
        table=nl.u32_of(attrs.get(nl.RTA_TABLE)) or table,
        dst_len=dst_len,
        dst=nl.ip_of(attrs.get(nl.RTA_DST)),
        gateway=nl.ip_of(attrs.get(nl.RTA_GATEWAY)),
        oif=nl.u32_of(attrs.get(nl.RTA_OIF)),
        priority=nl.u32_of(attrs.get(nl.RTA_PRIORITY)) or 0,
        kind=kind,
        protocol=protocol,
    )


def _link(message: bytes, offset: int) -> Link:
    _, _, index, flags, _ = nl.IFINFOMSG.unpack_from(message, offset)
    attrs = nl.attrs(message, offset + nl.IFINFOMSG.size, len(message))
    state = attrs.get(nl.IFLA_OPERSTATE, b"\0")[0]
    return Link(
        index=index,
        name=nl.text(attrs.get(nl.IFLA_IFNAME)) or "",
        flags=flags,
        mtu=nl.u32_of(attrs.get(nl.IFLA_MTU)),
        mac=nl.mac_text(attrs.get(nl.IFLA_ADDRESS)),
        operstate=nl.OPERSTATES[state] if state < len(nl.OPERSTATES) else str(state),
        alias=nl.text(attrs.get(nl.IFLA_IFALIAS)),
    )

"""Read-only rtnetlink for the checks: links, addresses, neighbors and routes as small records.

The checks (CHECK, reconcile after a restart, /v1/pods inspection) only compare a handful of
attributes with a pod record. Building pyroute2's full message objects cost about 1 ms per request
(a reconcile of 250 pods spent most of its time there), so the checks read the kernel's answers
here: one request on a NETLINK_ROUTE socket the caller made (in the pod namespace or the node's),
the fixed headers and the few attributes compared unpacked with `struct`, nothing else.
Message layouts are those of linux/rtnetlink.h, linux/if_link.h, linux/if_addr.h and
linux/neighbour.h. A refused request raises OSError with the kernel's errno (callers wrap it in
agent.netlink.translated); a dump the kernel marks as interrupted (the table changed while it was
read) is read again.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Message = tuple[int, bytes, int]  # type, the whole message, offset of its body

NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_DUMP_INTR, NLM_F_DUMP = 0x1, 0x2, 0x10, 0x300
RTM_NEWLINK, RTM_GETLINK = 16, 18
RTM_NEWADDR, RTM_GETADDR = 20, 22
RTM_NEWROUTE, RTM_GETROUTE = 24, 26
RTM_NEWNEIGH, RTM_GETNEIGH = 28, 30
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_OPERSTATE, IFLA_IFALIAS = 1, 3, 4, 16, 20
IFA_ADDRESS = 1
NDA_DST, NDA_LLADDR = 1, 2
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_TABLE = 1, 4, 5, 6, 15
RT_TABLE_COMPAT = 252
OPERSTATES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")
_HDR = struct.Struct("=IHHII")  # nlmsghdr
_ATTR = struct.Struct("=HH")  # rtattr
_IFINFO = struct.Struct("=BxHiII")  # ifinfomsg
_IFADDR = struct.Struct("=BBBBI")  # ifaddrmsg
_NDMSG = struct.Struct("=BxxxiHBB")  # ndmsg
_RTMSG = struct.Struct("=BBBBBBBBI")  # rtmsg
_I32 = struct.Struct("=i")
_U32 = struct.Struct("=I")
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


def _attrs(data: bytes, offset: int, end: int) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    while offset + 4 <= end:
        length, kind = _ATTR.unpack_from(data, offset)
        if length < 4:
            break
        out[kind & 0x3FFF] = data[offset + 4 : offset + length]  # without NLA_F_* bits
        offset += (length + 3) & ~3
    return out


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.split(b"\0", 1)[0].decode(errors="replace")


def _mac(raw: bytes | None) -> str:
    return ":".join(f"{b:02x}" for b in raw or b"")


def _ip(raw: bytes | None) -> IPAddress | None:
    return None if raw is None else ipaddress.ip_address(raw)


def _u32(raw: bytes | None) -> int | None:
    return None if raw is None else int(_U32.unpack_from(raw)[0])


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
        self.sock.send(_HDR.pack(_HDR.size + len(body), kind, NLM_F_REQUEST | flags, seq, 0) + body)
        out: list[Message] = []
        interrupted = False
        while True:
            data = self.sock.recv(_BUFSIZE)
            offset = 0
            while offset + _HDR.size <= len(data):
                length, mtype, mflags, mseq, _ = _HDR.unpack_from(data, offset)
                if length < _HDR.size:
                    break
                if mseq == seq:  # anything else is a late answer to an earlier request
                    interrupted |= bool(mflags & NLM_F_DUMP_INTR)
                    if mtype == NLMSG_ERROR:
                        code = -_I32.unpack_from(data, offset + _HDR.size)[0]
                        if code:
                            raise OSError(code, os.strerror(code))
                        return out, interrupted
                    if mtype == NLMSG_DONE:
                        return out, interrupted
                    out.append((mtype, data[offset : offset + length], _HDR.size))
                    if not mflags & NLM_F_MULTI:
                        return out, interrupted
                offset += (length + 3) & ~3

    def _dump(self, kind: int, body: bytes) -> list[Message]:
        for _ in range(_DUMP_TRIES):
            found, interrupted = self._request(kind, NLM_F_DUMP, body)
            if not interrupted:
                break
        return found  # interrupted every time: the last one is as good as any

    def link(self, name: str) -> Link | None:
        """The link named `name`, or None when there is none."""
        raw = name.encode() + b"\0"
        attr = _ATTR.pack(4 + len(raw), IFLA_IFNAME) + raw + b"\0" * (-len(raw) % 4)
        try:
            found, _ = self._request(RTM_GETLINK, 0, _IFINFO.pack(0, 0, 0, 0, 0) + attr)
        except OSError as exc:
            if exc.errno == errno.ENODEV:
                return None
            raise
        return next((_link(m, o) for t, m, o in found if t == RTM_NEWLINK), None)

    def route_to(self, address: IPAddress) -> Route | None:
        """The route the kernel picks for traffic to `address` (`ip route get`); OSError
        (ENETUNREACH, EACCES, ...) when there is none."""
        family = socket.AF_INET if address.version == 4 else socket.AF_INET6
        raw = address.packed
        attr = _ATTR.pack(4 + len(raw), RTA_DST) + raw
        body = _RTMSG.pack(family, address.max_prefixlen, 0, 0, 0, 0, 0, 0, 0) + attr
        found, _ = self._request(RTM_GETROUTE, 0, body)
        routes = [_route(m, o) for t, m, o in found if t == RTM_NEWROUTE]
        return routes[0] if routes else None

    def links(self) -> list[Link]:
        return [_link(m, o) for t, m, o in self._dump(RTM_GETLINK, _IFINFO.pack(0, 0, 0, 0, 0))
                if t == RTM_NEWLINK]

    def addresses(self) -> list[Address]:
        out = []
        for t, m, o in self._dump(RTM_GETADDR, _IFADDR.pack(0, 0, 0, 0, 0)):
            _, plen, _, _, index = _IFADDR.unpack_from(m, o)
            ip = _ip(_attrs(m, o + _IFADDR.size, len(m)).get(IFA_ADDRESS))
            if t == RTM_NEWADDR and ip is not None:
                out.append(Address(index, ip, plen))
        return out

    def neighbors(self, family: int) -> list[Neighbor]:
        out = []
        for t, m, o in self._dump(RTM_GETNEIGH, _NDMSG.pack(family, 0, 0, 0, 0)):
            _, index, state, _, _ = _NDMSG.unpack_from(m, o)
            attrs = _attrs(m, o + _NDMSG.size, len(m))
            lladdr = attrs.get(NDA_LLADDR)
            if t == RTM_NEWNEIGH:
                out.append(Neighbor(index, _ip(attrs.get(NDA_DST)),
                                    None if lladdr is None else _mac(lladdr), state))
        return out

    def routes(self, family: int, table: int | None = None) -> list[Route]:
        """Every route of `family` (0: all), or those of routing table `table` only."""
        body = _RTMSG.pack(family, 0, 0, 0, 0, 0, 0, 0, 0)
        found = [
            _route(m, o)
            for t, m, o in self._dump(RTM_GETROUTE, body)
            # rtm_table is the table unless the ID needs more than 8 bits (then RTA_TABLE):
            # others are skipped before their attributes are read
            if t == RTM_NEWROUTE and (table is None or m[o + 4] in (table, RT_TABLE_COMPAT))
        ]
        return found if table is None else [r for r in found if r.table == table]


def _route(message: bytes, offset: int) -> Route:
    _, dst_len, _, _, table, _, _, kind, _ = _RTMSG.unpack_from(message, offset)
    attrs = _attrs(message, offset + _RTMSG.size, len(message))
    return Route(
        table=_u32(attrs.get(RTA_TABLE)) or table,
        dst_len=dst_len,
        dst=_ip(attrs.get(RTA_DST)),
        gateway=_ip(attrs.get(RTA_GATEWAY)),
        oif=_u32(attrs.get(RTA_OIF)),
        priority=_u32(attrs.get(RTA_PRIORITY)) or 0,
        kind=kind,
    )


def _link(message: bytes, offset: int) -> Link:
    _, _, index, flags, _ = _IFINFO.unpack_from(message, offset)
    attrs = _attrs(message, offset + _IFINFO.size, len(message))
    state = attrs.get(IFLA_OPERSTATE, b"\0")[0]
    return Link(
        index=index,
        name=_text(attrs.get(IFLA_IFNAME)) or "",
        flags=flags,
        mtu=_u32(attrs.get(IFLA_MTU)),
        mac=_mac(attrs.get(IFLA_ADDRESS)),
        operstate=OPERSTATES[state] if state < len(OPERSTATES) else str(state),
        alias=_text(attrs.get(IFLA_IFALIAS)),
    )

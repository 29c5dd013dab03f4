"""Raw rtnetlink for an ADD's hot path: requests packed with struct, sent as one batch.

An ADD wires a pod with about a dozen small netlink requests. Through pyroute2 each one costs
0.25-0.4 ms of Python (an asyncio loop turn, its request filters, a full decode of the answer),
and each is a round trip of its own. Here the requests of one step go to the kernel in a single
sendmsg: rtnetlink handles the messages of a datagram one after the other (a later one sees what
an earlier one created, so "add a link, tag it, read it back" is one batch), answers each with its
own acknowledgement, and goes on after a failed one. `Batch.send` returns once every request is
acknowledged and raises the first failure as RequestFailed (an OSError; agent/linux/netlink
translates it).

Only the few request kinds the ADD needs are here; everything else keeps using pyroute2 (its
IPRoute objects read the same kernel state).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

NLMSG_ERROR = 2
RTM_NEWLINK, RTM_GETLINK, RTM_NEWADDR, RTM_NEWROUTE, RTM_NEWNEIGH = 16, 18, 20, 24, 28
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE = 0x100, 0x200, 0x400
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_LINKINFO = 1, 3, 4, 18
IFLA_IFALIAS, IFLA_NET_NS_FD = 20, 28
IFLA_INFO_KIND, IFLA_INFO_DATA, VETH_INFO_PEER = 1, 2, 1
IFA_ADDRESS, IFA_LOCAL = 1, 2
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY = 1, 4, 5, 6
NDA_DST, NDA_LLADDR = 1, 2
NLA_F_NESTED = 0x8000
IFF_UP = 0x1
RT_TABLE_MAIN, RTPROT_BOOT, RTN_UNICAST = 254, 3, 1
SCOPE_UNIVERSE, SCOPE_LINK = 0, 253
NUD_PERMANENT = 0x80

_HDR = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_IFINFO = struct.Struct("=BxHiII")  # ifinfomsg: family, type, index, flags, change
_IFADDR = struct.Struct("=BBBBi")  # ifaddrmsg: family, prefixlen, flags, scope, index
_RTMSG = struct.Struct("=BBBBBBBBI")  # rtmsg: family, dst_len, src_len, tos, table, ...
_NDMSG = struct.Struct("=BxxxiHBB")  # ndmsg: family, ifindex, state, flags, type
_ERR = struct.Struct("=i")


def _attr(kind: int, payload: bytes) -> bytes:
    size = 4 + len(payload)
    return struct.pack("=HH", size, kind) + payload + b"\0" * (-size % 4)


def _str(kind: int, text: str) -> bytes:
    return _attr(kind, text.encode() + b"\0")


def _u32(kind: int, value: int) -> bytes:
    return _attr(kind, struct.pack("=I", value))


def _mac(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


def _ip(address: str) -> tuple[int, bytes]:
    ip = ipaddress.ip_address(address)
    return (socket.AF_INET if ip.version == 4 else socket.AF_INET6), ip.packed


@dataclass(frozen=True)
class Link:
    """What a link request read back: the index and the MAC."""

    index: int
    mac: str


@dataclass
class Batch:
    """Requests to send together; `send` runs them in order, in the socket's namespace."""

    sock: socket.socket
    _queued: list[_Request] = field(default_factory=list)
    _seq: int = 0

    def _add(self, kind: int, flags: int, body: bytes, what: str, ok: int = 0) -> int:
        self._seq += 1
        size = _HDR.size + len(body)
        header = _HDR.pack(size, kind, flags | NLM_F_REQUEST | NLM_F_ACK, self._seq, 0)
        self._queued.append(_Request(self._seq, header + body, what, ok))
        return self._seq

    def add_veth(self, name: str, mtu: int, peer_name: str, peer_netns_fd: int,
                 peer_mac: str | None) -> None:
        """A veth pair, this end up (no carrier until the peer is up), the peer down inside
        the namespace `peer_netns_fd`."""
        peer = _IFINFO.pack(0, 0, 0, 0, 0) + _str(IFLA_IFNAME, peer_name) + _u32(IFLA_MTU, mtu)
        peer += _u32(IFLA_NET_NS_FD, peer_netns_fd)
        if peer_mac:
            peer += _attr(IFLA_ADDRESS, _mac(peer_mac))
        data = _attr(VETH_INFO_PEER | NLA_F_NESTED, peer)
        info = _str(IFLA_INFO_KIND, "veth") + _attr(IFLA_INFO_DATA | NLA_F_NESTED, data)
        body = _IFINFO.pack(0, 0, 0, IFF_UP, IFF_UP) + _str(IFLA_IFNAME, name)
        body += _u32(IFLA_MTU, mtu) + _attr(IFLA_LINKINFO | NLA_F_NESTED, info)
        self._add(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, body, f"creating veth {name}")

    def set_link(self, name: str = "", index: int = 0, up: bool | None = None, mtu: int = 0,
                 alias: str = "") -> None:
        """Changes a link found by index, else by name (up: True/False; None leaves it)."""
        change = 0 if up is None else IFF_UP
        body = _IFINFO.pack(0, 0, index, IFF_UP if up else 0, change)
        if not index:
            body += _str(IFLA_IFNAME, name)
        if mtu:
            body += _u32(IFLA_MTU, mtu)
        if alias:
            body += _str(IFLA_IFALIAS, alias)
        self._add(RTM_NEWLINK, 0, body, f"setting link {name or index}")

    def get_link(self, name: str) -> int:
        """Reads link `name` back; `send` returns it under the returned number."""
        body = _IFINFO.pack(0, 0, 0, 0, 0) + _str(IFLA_IFNAME, name)
        return self._add(RTM_GETLINK, 0, body, f"reading link {name}")

    def add_address(self, index: int, address: str, prefixlen: int, flags: int = 0) -> None:
        """Adds an address; one already there counts as done."""
        family, raw = _ip(address)
        body = _IFADDR.pack(family, prefixlen, flags, 0, index)
        body += _attr(IFA_LOCAL, raw) + _attr(IFA_ADDRESS, raw)
        what = f"adding address {address}/{prefixlen}"
        self._add(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, body, what, ok=errno.EEXIST)

    def replace_route(self, dst: str, dst_len: int, oif: int, scope: int = SCOPE_UNIVERSE,
                      gateway: str = "", priority: int | None = None) -> None:
        family, raw = _ip(dst)
        body = _RTMSG.pack(family, dst_len, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT, scope,
                           RTN_UNICAST, 0)
        if dst_len:
            body += _attr(RTA_DST, raw)
        body += _u32(RTA_OIF, oif)
        if gateway:
            body += _attr(RTA_GATEWAY, _ip(gateway)[1])
        if priority is not None:
            body += _u32(RTA_PRIORITY, priority)
        self._add(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, body,
                  f"routing {dst}/{dst_len} via link {oif}")

    def replace_neighbor(self, index: int, address: str, mac: str) -> None:
        """A permanent neighbor entry."""
        family, raw = _ip(address)
        body = _NDMSG.pack(family, index, NUD_PERMANENT, 0, 0)
        body += _attr(NDA_DST, raw) + _attr(NDA_LLADDR, _mac(mac))
        self._add(RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE, body, f"neighbor {address}")

    def send(self) -> dict[int, Link]:
        """Sends every request in one datagram; returns the links read, by request number.
        Raises OSError(errno, what) for the first request that failed."""
        queued, self._queued = self._queued, []
        if not queued:
            return {}
        self.sock.sendto(b"".join(r.data for r in queued), (0, 0))
        by_seq = {r.seq: r for r in queued}
        waiting = set(by_seq)
        links: dict[int, Link] = {}
        failed: list[tuple[int, int]] = []
        while waiting:
            for kind, seq, payload in _parse(self.sock.recv(65536)):
                request = by_seq.get(seq)
                if request is None:
                    continue  # not ours (an answer to an earlier, abandoned batch)
                if kind == NLMSG_ERROR:
                    waiting.discard(seq)
                    code = -_ERR.unpack_from(payload)[0]
                    if code and code != request.ok:
                        failed.append((seq, code))
                elif kind == RTM_NEWLINK:
                    links[seq] = _link(payload)
        if failed:
            seq, code = min(failed)
            raise RequestFailed(code, by_seq[seq].what)
        return links


class RequestFailed(OSError):
    """A request of a batch was refused: `errno`, and `what` the request was doing."""

    def __init__(self, code: int, what: str) -> None:
        super().__init__(code, os.strerror(code))
        self.what = what


@dataclass(frozen=True)
class _Request:
    seq: int
    data: bytes
    what: str
    ok: int  # an errno that counts as success (0: none)


def _parse(data: bytes) -> Iterable[tuple[int, int, bytes]]:
    offset = 0
    while offset + _HDR.size <= len(data):
        size, kind, _, seq, _ = _HDR.unpack_from(data, offset)
        if size < _HDR.size:
            break
        yield kind, seq, data[offset + _HDR.size:offset + size]
        offset += (size + 3) & ~3


def _link(payload: bytes) -> Link:
    _, _, index, _, _ = _IFINFO.unpack_from(payload)
    offset, mac = _IFINFO.size, ""
    while offset + 4 <= len(payload):
        size, kind = struct.unpack_from("=HH", payload, offset)
        if size < 4:
            break
        if kind & ~NLA_F_NESTED == IFLA_ADDRESS:
            mac = payload[offset + 4:offset + size].hex(":")
            break
        offset += (size + 3) & ~3
    return Link(index, mac)

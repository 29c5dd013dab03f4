"""The netlink wire format, defined once: message layouts, attributes and constants of rtnetlink
and of conntrack's nfnetlink.

The raw writes (agent/linux/nlwrite), the raw reads (agent/linux/nlread) and the conntrack sweep
(agent/linux/nftpolicy/conntrack) all speak it; nothing else packs or unpacks netlink bytes
(pyroute2, behind agent/linux/iproute, has its own codec). Names and values are the kernel's
(linux/netlink.h, linux/rtnetlink.h, linux/if_link.h, linux/if_addr.h, linux/neighbour.h,
linux/veth.h, linux/netfilter/nfnetlink.h, linux/netfilter/nfnetlink_conntrack.h), so a reader
can check them against the headers. Layouts use native byte order ("=") and the headers' field
widths: ifaddrmsg's ifa_index is a __u32, ifinfomsg's ifi_index and ndmsg's ndm_ifindex are
signed ints.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Iterator

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# linux/netlink.h: message types and flags
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_ACK, NLM_F_DUMP_INTR = 0x1, 0x2, 0x4, 0x10
NLM_F_DUMP = 0x300  # NLM_F_ROOT | NLM_F_MATCH
NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE = 0x100, 0x200, 0x400
NLA_F_NESTED, NLA_F_NET_BYTEORDER = 0x8000, 0x4000
NLA_TYPE_MASK = ~(NLA_F_NESTED | NLA_F_NET_BYTEORDER) & 0xFFFF

# linux/rtnetlink.h: request types
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_NEWADDR, RTM_GETADDR = 20, 22
RTM_NEWROUTE, RTM_GETROUTE = 24, 26
RTM_NEWNEIGH, RTM_GETNEIGH = 28, 30

# linux/if_link.h, linux/veth.h, linux/if.h: links
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_LINK, IFLA_OPERSTATE = 1, 3, 4, 5, 16
IFLA_LINKINFO, IFLA_IFALIAS, IFLA_NET_NS_FD = 18, 20, 28
IFLA_INFO_KIND, IFLA_INFO_DATA = 1, 2
VETH_INFO_PEER = 1
IFLA_MACVLAN_MODE, MACVLAN_MODE_PASSTHRU = 1, 8
IFF_UP = 0x1
# IF_OPER_* by value (RFC 2863 states), as `ip link` names them
OPERSTATES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")

# linux/if_addr.h: addresses
IFA_ADDRESS, IFA_LOCAL = 1, 2
IFA_F_NODAD = 0x02  # IPv6: no duplicate address detection

# linux/rtnetlink.h: routes
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_TABLE = 1, 4, 5, 6, 15
RT_TABLE_COMPAT, RT_TABLE_MAIN = 252, 254
RTPROT_BOOT = 3
RTN_UNICAST = 1
RT_SCOPE_UNIVERSE, RT_SCOPE_LINK = 0, 253
RTNH_F_ONLINK = 4

# linux/neighbour.h: neighbors and FDB entries
NDA_DST, NDA_LLADDR = 1, 2
NUD_NOARP, NUD_PERMANENT = 0x40, 0x80
NTF_SELF = 0x02

# linux/netfilter/nfnetlink.h, nfnetlink_conntrack.h: conntrack (the NetworkPolicy sweep)
NETLINK_NETFILTER = 12
NFNL_SUBSYS_CTNETLINK = 1
IPCTNL_MSG_CT_NEW, IPCTNL_MSG_CT_GET, IPCTNL_MSG_CT_DELETE = 0, 1, 2
CTA_TUPLE_ORIG, CTA_TUPLE_REPLY, CTA_ID, CTA_ZONE = 1, 2, 12, 18
CTA_TUPLE_IP, CTA_TUPLE_PROTO = 1, 2
CTA_IP_V4_SRC, CTA_IP_V6_SRC = 1, 3
CTA_PROTO_NUM, CTA_PROTO_SRC_PORT = 1, 2

NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
RTATTR = struct.Struct("=HH")  # len, type
NLMSGERR = struct.Struct("=i")  # error (a negative errno; 0 is an acknowledgement)
IFINFOMSG = struct.Struct("=BxHiII")  # family, (pad), type, index, flags, change
IFADDRMSG = struct.Struct("=BBBBI")  # family, prefixlen, flags, scope, index (__u32)
RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol, scope,
#                                      type, flags
NDMSG = struct.Struct("=BxxxiHBB")  # family, (pad), ifindex, state, flags, type
NFGENMSG = struct.Struct("=BBH")  # family, version (NFNETLINK_V0), res_id
_U32 = struct.Struct("=I")


# NLMSG_ALIGN / RTA_ALIGN: messages and attributes start on 4-byte boundaries, so a size is
# rounded up with (size + 3) & ~3. Written out in the loops below rather than called: they run for
# every attribute of every answer (a link has about 40).
# ---- packing ------------------------------------------------------------------------------


def message(kind: int, flags: int, seq: int, body: bytes) -> bytes:
    """One netlink message: the header (its length counted in) and `body`."""
    return NLMSGHDR.pack(NLMSGHDR.size + len(body), kind, flags, seq, 0) + body


def attr(kind: int, payload: bytes) -> bytes:
    size = RTATTR.size + len(payload)
    return RTATTR.pack(size, kind) + payload + b"\0" * (-size & 3)


def nested(kind: int, payload: bytes) -> bytes:
    return attr(kind | NLA_F_NESTED, payload)


def attr_str(kind: int, text: str) -> bytes:
    """A NUL-terminated string attribute (IFLA_IFNAME, IFLA_IFALIAS, IFLA_INFO_KIND)."""
    return attr(kind, text.encode() + b"\0")


def attr_u32(kind: int, value: int) -> bytes:
    return attr(kind, _U32.pack(value))


def mac_bytes(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


def ip_bytes(address: str | IPAddress) -> tuple[int, bytes]:
    """(address family, the address in network byte order)."""
    ip = ipaddress.ip_address(address)
    return (socket.AF_INET if ip.version == 4 else socket.AF_INET6), ip.packed


# ---- parsing ------------------------------------------------------------------------------

Header = tuple[int, int, int, int, int]  # offset, length, type, flags, seq


def messages(data: bytes) -> Iterator[Header]:
    """The messages of one datagram, as (offset, length, type, flags, seq); the body of each
    starts at offset + NLMSGHDR.size."""
    offset = 0
    while offset + NLMSGHDR.size <= len(data):
        length, kind, flags, seq, _ = NLMSGHDR.unpack_from(data, offset)
        if length < NLMSGHDR.size:
            return  # a malformed length would loop for ever
        yield offset, length, kind, flags, seq
        offset += (length + 3) & ~3


def error_code(data: bytes, offset: int) -> int:
    """The errno of the NLMSG_ERROR message at `offset` (0: an acknowledgement)."""
    return -int(NLMSGERR.unpack_from(data, offset + NLMSGHDR.size)[0])


def attrs(data: bytes, offset: int, end: int) -> dict[int, bytes]:
    """The attributes between `offset` and `end`, by type (the NLA_F_* bits cleared)."""
    out: dict[int, bytes] = {}
    while offset + RTATTR.size <= end:
        length, kind = RTATTR.unpack_from(data, offset)
        if length < RTATTR.size:
            break
        out[kind & NLA_TYPE_MASK] = data[offset + RTATTR.size : offset + length]
        offset += (length + 3) & ~3
    return out


def find_attr(data: bytes, offset: int, end: int, kind: int) -> bytes | None:
    """The first attribute of type `kind` between `offset` and `end`; the rest is not read."""
    while offset + RTATTR.size <= end:
        length, found = RTATTR.unpack_from(data, offset)
        if length < RTATTR.size:
            break
        if found & NLA_TYPE_MASK == kind:
            return data[offset + RTATTR.size : offset + length]
        offset += (length + 3) & ~3
    return None


def text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.split(b"\0", 1)[0].decode(errors="replace")


def mac_text(raw: bytes | None) -> str:
    return (raw or b"").hex(":")


def ip_of(raw: bytes | None) -> IPAddress | None:
    return None if raw is None else ipaddress.ip_address(raw)


def u32_of(raw: bytes | None) -> int | None:
    return None if raw is None else int(_U32.unpack_from(raw)[0])

"""The conntrack sweep: after a change, the tracked connections it denies are deleted, so that
`ct state established` stops letting them through (their next packet is judged as new, by
the rules, and dropped).

Only connections of the given addresses are judged: those with one as the original source (the
pod opened it) or as the reply's source (the pod accepted it, directly or behind a Service's
DNAT), as the forward hook saw them: the original source, the reply's source as destination
(the DNATed backend), the reply's source port as destination port. One dump per address family
on a NETLINK_NETFILTER socket, read with the project's own codec (agent/linux/nlcodec): only the
two tuples' sources, the protocol and the reply's source port are unpacked, so a table of
thousands of entries is read in milliseconds (pyroute2 decoded every attribute of every entry:
up to seconds of the agent's CPU per sweep on a busy node). Filtered here, not by the kernel's
CTA_FILTER (through pyroute2 0.9.7 it found no IPv6 entry on Linux 6.18). An entry is deleted by
its original tuple, ID and zone, exactly as the dump gave them. In the calling thread's namespace.
When few addresses are swept, an entry is parsed only when one of them is among its bytes.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from agent.linux import nlcodec as nl
from agent.linux.nftpolicy.verdict import Flow
from agent.linux.nlread import Reader
from policy.model import IPAddress

log = logging.getLogger(__name__)
_PORTED = {6, 17, 132}  # TCP, UDP, SCTP
_GET = nl.NFNL_SUBSYS_CTNETLINK << 8 | nl.IPCTNL_MSG_CT_GET
_DELETE = nl.NFNL_SUBSYS_CTNETLINK << 8 | nl.IPCTNL_MSG_CT_DELETE
_NEW = nl.NFNL_SUBSYS_CTNETLINK << 8 | nl.IPCTNL_MSG_CT_NEW
_PORT = struct.Struct("!H")
PREFILTER_MAX = 32  # addresses searched for in an entry's bytes before it is parsed


@dataclass(frozen=True)
class Entry:
    """One tracked connection: what the verdict needs, and what deletes exactly it."""

    family: int
    flow: Flow
    key: bytes  # CTA_TUPLE_ORIG, CTA_ID and CTA_ZONE as the dump gave them


def _source(tuple_raw: bytes) -> tuple[bytes | None, int, int | None]:
    """A tuple's source address (packed), protocol and source port (None: none)."""
    parts = nl.attrs(tuple_raw, 0, len(tuple_raw))
    ip = nl.attrs(parts.get(nl.CTA_TUPLE_IP, b""), 0, len(parts.get(nl.CTA_TUPLE_IP, b"")))
    proto_raw = parts.get(nl.CTA_TUPLE_PROTO, b"")
    proto = nl.attrs(proto_raw, 0, len(proto_raw))
    number = proto.get(nl.CTA_PROTO_NUM, b"\0")[0]
    port = proto.get(nl.CTA_PROTO_SRC_PORT)
    return (ip.get(nl.CTA_IP_V4_SRC) or ip.get(nl.CTA_IP_V6_SRC), number,
            None if port is None else int(_PORT.unpack_from(port)[0]))


def entries(reader: Reader, family: int, wanted: set[bytes]) -> list[Entry]:
    """The tracked connections of `family` whose original or reply source is one of `wanted`
    (packed addresses)."""
    out = []
    # an entry without any wanted address among its bytes cannot be one of them: most entries
    # of a busy node are skipped by a search in C instead of a parse in Python
    few = tuple(wanted) if len(wanted) <= PREFILTER_MAX else None
    for kind, message, offset in reader.dump(_GET, nl.NFGENMSG.pack(family, 0, 0)):
        if kind != _NEW or (few is not None and not any(a in message for a in few)):
            continue
        top = nl.attrs(message, offset + nl.NFGENMSG.size, len(message))
        orig, reply = top.get(nl.CTA_TUPLE_ORIG), top.get(nl.CTA_TUPLE_REPLY)
        if orig is None or reply is None:
            continue
        src, proto, _ = _source(orig)
        reply_src, _, reply_port = _source(reply)
        if src is None or reply_src is None or (src not in wanted and reply_src not in wanted):
            continue
        flow = Flow(proto, ipaddress.ip_address(src), ipaddress.ip_address(reply_src),
                    reply_port if proto in _PORTED else None)
        key = nl.nested(nl.CTA_TUPLE_ORIG, orig) + b"".join(
            nl.attr(kind_, top[kind_]) for kind_ in (nl.CTA_ID, nl.CTA_ZONE) if kind_ in top)
        out.append(Entry(family, flow, key))
    return out


def sweep(addresses: Iterable[IPAddress], allowed: Callable[[Flow], bool]) -> int:
    """Deletes the tracked connections of `addresses` that `allowed` refuses; returns how
    many. Raises OSError when conntrack cannot be read."""
    deleted = 0
    by_family: dict[int, set[bytes]] = {}
    for a in addresses:
        by_family.setdefault(int(socket.AF_INET if a.version == 4 else socket.AF_INET6),
                             set()).add(a.packed)
    if not by_family:
        return 0
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, nl.NETLINK_NETFILTER) as sock:
        reader = Reader(sock)
        for family, wanted in sorted(by_family.items()):
            for entry in entries(reader, family, wanted):  # read whole before deleting
                if allowed(entry.flow):
                    continue
                try:
                    reader.request(_DELETE, nl.NFGENMSG.pack(family, 0, 0) + entry.key)
                    deleted += 1
                except OSError as exc:
                    if exc.errno != errno.ENOENT:  # ended by itself meanwhile: fine
                        raise
                log.debug("conntrack entry deleted, now denied: %s", entry.flow)
    return deleted

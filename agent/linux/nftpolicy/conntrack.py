"""The conntrack sweep: after a change, the tracked connections it denies are deleted, so that
`ct state established` stops letting them through (their next packet is judged as new, by
the rules, and dropped).

Only connections of the given addresses are judged: those with one as the original source (the
pod opened it) or as the reply's source (the pod accepted it, directly or behind a Service's
DNAT), as the forward hook saw them: the original source, the reply's source as destination
(the DNATed backend), the reply's source port as destination port. One dump per address family,
filtered here: the kernel's own filter (CTA_FILTER) through pyroute2 0.9.7 finds no IPv6 entry
(seen on Linux 6.18), so it is not used. In the calling thread's namespace.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Callable, Iterable

from pyroute2 import Conntrack
from pyroute2.netlink.exceptions import NetlinkError

from agent.linux.nftpolicy.verdict import Flow
from policy.model import IPAddress

log = logging.getLogger(__name__)
_PORTED = {6, 17, 132}  # TCP, UDP, SCTP
ENOENT = 2


def _flow(entry: object) -> Flow:
    orig, reply = entry.tuple_orig, entry.tuple_reply  # type: ignore[attr-defined]
    port = reply.sport if orig.proto in _PORTED else None
    return Flow(orig.proto, ipaddress.ip_address(orig.saddr), ipaddress.ip_address(reply.saddr),
                port)


def sweep(addresses: Iterable[IPAddress], allowed: Callable[[Flow], bool]) -> int:
    """Deletes the tracked connections of `addresses` that `allowed` refuses; returns how
    many. Raises NetlinkError when conntrack cannot be read."""
    deleted = 0
    by_family: dict[int, list[IPAddress]] = {}
    for a in addresses:
        by_family.setdefault(a.version, []).append(a)
    for version, mine in sorted(by_family.items()):
        family = socket.AF_INET if version == 4 else socket.AF_INET6
        ct = Conntrack(nfgen_family=family)
        try:
            wanted = {str(a) for a in mine}
            entries = [e for e in ct.dump_entries()  # materialized before deleting
                       if e.tuple_orig.saddr in wanted or e.tuple_reply.saddr in wanted]
            for entry in entries:
                flow = _flow(entry)
                if allowed(flow):
                    continue
                try:
                    ct.delete(entry)
                    deleted += 1
                except NetlinkError as exc:
                    if exc.code != ENOENT:  # ended by itself meanwhile: fine
                        raise
                log.debug("conntrack entry deleted, now denied: %s", flow)
        finally:
            ct.close()
    return deleted

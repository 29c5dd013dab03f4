"""VPP's stats segment: the one place it is read (the API socket carries no counters).

The acl plugin (26.06) keeps a combined counter per ACL rule at `/acl/<acl index>/matches`, one
vector per VPP thread; `acl_stats_intf_counters_enable` makes the dataplane count, and nothing in
the binary API reads them. VPP's main heap is `/mem/main heap` (total, used, free, ...), with
`/used` and `/total` naming its entries. Reading maps VPP's shared memory through
`statseg { socket-name }` (default /run/vpp/stats.sock).

A mapping outlives the VPP that made it: after VPP stops, reads through it go on answering that
VPP's last values, also once a new VPP runs (measured on 26.06). So each read first looks at the
socket file: gone (VPP stopped and removed it) means no answer, another file (a restarted VPP
binds a new one) means the segment is mapped anew. A killed VPP leaves its file: its last values
are read until the next VPP starts (the dataplane probe says meanwhile that VPP is down).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from vpp_papi.vpp_stats import VPPStats

log = logging.getLogger(__name__)

T = TypeVar("T")

HEAP_USED = "/mem/main heap/used"
HEAP_TOTAL = "/mem/main heap/total"


def stats_socket(api_socket: str) -> str:
    """The stats socket beside VPP's API socket, as VPP's defaults place them (/run/vpp/)."""
    return os.path.join(os.path.dirname(api_socket), "stats.sock")


class AclCounters(Protocol):
    def acl_matches(self, acl_index: int) -> list[tuple[int, int]] | None:
        """(packets, bytes) per rule of the ACL, summed over VPP's threads; None when the
        counters cannot be read."""
        ...


class MainHeap(Protocol):
    def main_heap(self) -> tuple[int, int] | None:
        """(used, total) bytes of VPP's main heap; None when it cannot be read."""
        ...


def map_segment(socket_path: str) -> Any:
    """VPP's stats segment, mapped through its socket (vpp-papi's `VPPStats`)."""
    stats = VPPStats(socketname=socket_path, timeout=2)
    stats.connect()
    return stats


class StatsSegment:
    """`AclCounters` and `MainHeap` from VPP's stats segment socket. `open_segment` maps it
    (tests give a fake that answers `get_counter` and `disconnect`)."""

    def __init__(self, socket_path: str,
                 open_segment: Callable[[str], Any] = map_segment) -> None:
        self.socket_path = socket_path
        self._open = open_segment
        self._stats: Any = None
        self._socket_id: tuple[int, int] | None = None  # (inode, ctime) of the socket mapped
        self._lock = threading.Lock()

    def acl_matches(self, acl_index: int) -> list[tuple[int, int]] | None:
        per_thread = self._read(lambda stats: stats.get_counter(f"/acl/{acl_index}/matches"))
        if per_thread is None:
            return None
        totals: list[tuple[int, int]] = []
        for thread in per_thread:
            for i, counter in enumerate(thread):
                packets, octets = int(counter["packets"]), int(counter["bytes"])
                if i < len(totals):
                    totals[i] = (totals[i][0] + packets, totals[i][1] + octets)
                else:
                    totals.append((packets, octets))
        return totals

    def main_heap(self) -> tuple[int, int] | None:
        # Each name is a one-entry vector: [bytes].
        read = self._read(lambda stats: (stats.get_counter(HEAP_USED)[0],
                                         stats.get_counter(HEAP_TOTAL)[0]))
        if read is None:
            return None
        return int(read[0]), int(read[1])

    def _read(self, read: Callable[[Any], T]) -> T | None:
        """`read` on the segment of the VPP serving the socket now; None when that fails."""
        with self._lock:
            try:
                st = os.stat(self.socket_path)
                socket_id = (st.st_ino, st.st_ctime_ns)
                if self._stats is not None and socket_id != self._socket_id:
                    log.debug("VPP stats segment at %s: a new VPP; mapping anew",
                              self.socket_path)
                    self._drop()
                if self._stats is None:
                    self._stats, self._socket_id = self._open(self.socket_path), socket_id
                return read(self._stats)
            except Exception as exc:  # vpp-papi raises bare Exceptions and OSErrors here
                log.debug("VPP stats segment at %s: %s", self.socket_path, exc)
                self._drop()
                return None

    def _drop(self) -> None:
        stats, self._stats = self._stats, None
        if stats is not None:
            try:
                stats.disconnect()
            except Exception as exc:
                log.debug("VPP stats segment disconnect: %s", exc)

    def close(self) -> None:
        with self._lock:
            self._drop()

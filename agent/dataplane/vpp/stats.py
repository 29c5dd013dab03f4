"""VPP's stats segment: the one place it is read (the API socket carries no counters).

The acl plugin (26.06) keeps a combined counter per ACL rule at `/acl/<acl index>/matches`, one
vector per VPP thread; `acl_stats_intf_counters_enable` makes the dataplane count, and nothing in
the binary API reads them. Reading maps VPP's shared memory through `statseg { socket-name }`
(default /run/vpp/stats.sock); a VPP that is gone or restarted makes the next read connect anew.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from vpp_papi.vpp_stats import VPPStats

log = logging.getLogger(__name__)


class AclCounters(Protocol):
    def acl_matches(self, acl_index: int) -> list[tuple[int, int]] | None:
        """(packets, bytes) per rule of the ACL, summed over VPP's threads; None when the
        counters cannot be read."""
        ...


class StatsSegment:
    """`AclCounters` from VPP's stats segment socket."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._stats: Any = None
        self._lock = threading.Lock()

    def acl_matches(self, acl_index: int) -> list[tuple[int, int]] | None:
        with self._lock:
            try:
                if self._stats is None:
                    stats = VPPStats(socketname=self.socket_path, timeout=2)
                    stats.connect()
                    self._stats = stats
                per_thread = self._stats.get_counter(f"/acl/{acl_index}/matches")
            except Exception as exc:  # vpp-papi raises bare Exceptions and OSErrors here
                log.debug("VPP stats segment at %s: %s", self.socket_path, exc)
                self._drop()
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

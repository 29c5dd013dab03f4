"""VPP's main heap, watched: a warning before it fills, and the last reading for the gauges.

VPP takes every interface, route, neighbor, ACL and session of the node from its main heap
(`memory { main-heap-size }` in its startup config), and an allocation that finds it full calls
`os_panic()`: VPP aborts, and every pod's interface goes with it. The agent cannot enlarge the
heap; it can say early, in its log, that the size will not do (docs/vpp.md, "Sizing VPP's
memory").

`HeapAlarm` decides what deserves a line (pure: tests give it readings and times). `HeapWatch`
reads the stats segment every `READ_EVERY` seconds in a loop of its own, logs what the alarm
says and keeps the reading: the `vswitch_cni_vpp_main_heap_*` gauges read that, so a scrape
never waits on VPP (agent/app/gauges.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from agent.dataplane.vpp.stats import MainHeap, StatsSegment, stats_socket
from agent.infra.loops import SupervisedLoop

log = logging.getLogger(__name__)

WARN_ABOVE = 0.8  # share of the heap in use over which the agent warns
# Back under this share the agent says so; the gap keeps a heap that hovers at 80 % from
# making two lines every read.
CLEAR_BELOW = 0.75
REMIND_EVERY = 600.0  # seconds between two warnings while the heap stays above
READ_EVERY = 10.0  # seconds between two reads: the heap grows with pods, not within seconds
ADVICE = ("VPP aborts when an allocation finds its main heap full, and every pod's interface "
          "goes with it: raise memory { main-heap-size } in VPP's startup config (docs/vpp.md, "
          "\"Sizing VPP's memory\")")


@dataclass(frozen=True)
class HeapNotice:
    """A line for the log: its level and text."""

    level: int
    text: str


class HeapAlarm:
    """A warning when the heap's use crosses `warn_above`, a reminder every `remind_every`
    seconds while it stays above, and one line when it is back under `clear_below`; nothing
    for the reads in between."""

    def __init__(self, warn_above: float = WARN_ABOVE, clear_below: float = CLEAR_BELOW,
                 remind_every: float = REMIND_EVERY) -> None:
        self.warn_above = warn_above
        self.clear_below = clear_below
        self.remind_every = remind_every
        self.above = False
        self._warned_at = 0.0

    def observe(self, used: int, total: int, now: float) -> HeapNotice | None:
        """The line a reading of `used` of `total` bytes at time `now` deserves, if any."""
        if total <= 0:  # no heap to speak of: nothing read worth judging
            return None
        share = used / total
        if not self.above:
            if share <= self.warn_above:
                return None
            self.above, self._warned_at = True, now
            return HeapNotice(logging.WARNING, f"{_usage('is', used, total)}; {ADVICE}")
        if share < self.clear_below:
            self.above = False
            return HeapNotice(logging.INFO, f"{_usage('is back to', used, total)}, under "
                                            f"{self.clear_below:.0%}")
        if now - self._warned_at >= self.remind_every:
            self._warned_at = now
            return HeapNotice(logging.WARNING, f"{_usage('is still', used, total)}; {ADVICE}")
        return None


def _usage(verb: str, used: int, total: int) -> str:
    mib = 1 << 20
    return (f"VPP's main heap {verb} {used / total:.0%} full ({used / mib:.1f} MiB used of "
            f"{total / mib:.1f} MiB; {used} of {total} bytes)")


class HeapUnreadable(Exception):
    """The stats segment did not answer (VPP away, or its statseg socket elsewhere)."""


class HeapWatch:
    """VPP's main heap read every `interval` seconds by a thread of its own; `last()` is the
    latest reading, None before the first and while the segment cannot be read (a heap of a VPP
    that is gone says nothing of the next one)."""

    def __init__(self, reader: MainHeap, where: str, *, interval: float = READ_EVERY,
                 alarm: HeapAlarm | None = None, clock: Callable[[], float] = time.monotonic,
                 close: Callable[[], None] | None = None) -> None:
        self.where = where
        self.alarm = alarm or HeapAlarm()
        self._reader = reader
        self._clock = clock
        self._close = close
        self._last: tuple[int, int] | None = None
        # A failed read raises HeapUnreadable: the loop logs the first one and the recovery,
        # and the repeats go to debug.
        self.loop = SupervisedLoop("vpp-heap", self.read_once, interval, immediately=True,
                                   expected=(HeapUnreadable,), log=log)

    @classmethod
    def beside(cls, api_socket: str) -> HeapWatch:
        """The watch of the VPP serving `api_socket`, through the stats socket beside it."""
        stats = StatsSegment(stats_socket(api_socket))
        return cls(stats, stats.socket_path, close=stats.close)

    def start(self) -> None:
        self.loop.start()

    def stop(self) -> None:
        self.loop.stop(timeout=3)  # a read has a 2 s timeout
        if self._close is not None:
            self._close()

    def last(self) -> tuple[int, int] | None:
        """(used, total) bytes as last read; never waits on VPP."""
        return self._last

    def read_once(self) -> None:
        """One read, in the caller's thread (the loop's, or a test's)."""
        reading = self._reader.main_heap()
        self._last = reading  # one reference swapped: readers see the old or the new tuple
        if reading is None:
            raise HeapUnreadable(f"VPP's main heap cannot be read from its stats segment at "
                                 f"{self.where} (statseg {{ socket-name }})")
        notice = self.alarm.observe(*reading, self._clock())
        if notice is not None:
            log.log(notice.level, "%s", notice.text)

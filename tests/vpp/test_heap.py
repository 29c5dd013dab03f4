"""VPP's main heap watched (agent/dataplane/vpp/heap.py), its gauges (agent/app/gauges.py) and the
stats segment's freshness (agent/dataplane/vpp/stats.py), without a VPP: CI's fake VPP has no
stats segment, so the alarm gets readings and times, the watch a fake reader, and the segment a
fake mapping behind a real socket file. tests/vpp/test_heap_real_vpp.py reads a real VPP's heap.

Plan:
- the alarm: silent up to 80 % (80 % itself too), one WARNING on crossing that names used, total,
  the share, `main-heap-size` and docs/vpp.md; silent on the next reads, a reminder after 10
  minutes; silent between 75 % and 80 % on the way down, one INFO under 75 %, and a new crossing
  warns again; a total of 0 says nothing;
- the watch: `last()` is the latest reading and None before the first and while the segment
  does not answer; its log has one line per crossing, not per read; an unreadable segment is
  one WARNING naming the socket, however often it repeats, and its return one INFO;
- the gauges: no sample before the first read or while the segment does not answer, the
  reading's bytes after;
- the segment: mapped once and reused while the same socket file is there; a new file (VPP
  restarted) maps anew, the old mapping let go; no file, or a read that fails, answers None.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.app.gauges import heap_gauges
from agent.dataplane.vpp.heap import HeapAlarm, HeapWatch
from agent.dataplane.vpp.stats import HEAP_TOTAL, HEAP_USED, StatsSegment, stats_socket
from agent.infra.metrics import Metrics

MIB = 1 << 20
TOTAL = 512 * MIB


def used(share: float) -> int:
    return int(TOTAL * share)


# ---- the alarm -------------------------------------------------------------------------------

def test_the_alarm_is_silent_up_to_80_percent() -> None:
    alarm = HeapAlarm()
    assert [alarm.observe(used(s), TOTAL, 0.0) for s in (0.1, 0.5, 0.79, 0.8)] == [None] * 4
    assert not alarm.above


def test_crossing_warns_once_with_what_to_change() -> None:
    alarm = HeapAlarm()
    notice = alarm.observe(used(0.85), TOTAL, 0.0)
    assert notice is not None and notice.level == logging.WARNING
    for part in ("85%", f"{used(0.85)} of {TOTAL} bytes", "512.0 MiB", "main-heap-size",
                 "docs/vpp.md", "Sizing VPP's memory"):
        assert part in notice.text, (part, notice.text)
    assert [alarm.observe(used(s), TOTAL, 10.0 * i) for i, s in enumerate((0.9, 0.86, 0.95), 1)
            ] == [None] * 3


def test_a_heap_that_stays_above_is_recalled_every_ten_minutes() -> None:
    alarm = HeapAlarm()
    assert alarm.observe(used(0.9), TOTAL, 100.0) is not None
    assert alarm.observe(used(0.9), TOTAL, 699.0) is None
    reminder = alarm.observe(used(0.91), TOTAL, 700.0)
    assert reminder is not None and reminder.level == logging.WARNING
    assert "still 91%" in reminder.text and "main-heap-size" in reminder.text
    assert alarm.observe(used(0.91), TOTAL, 1299.0) is None
    assert alarm.observe(used(0.91), TOTAL, 1300.0) is not None


def test_falling_back_says_so_once_below_75_percent_and_a_new_crossing_warns_again() -> None:
    alarm = HeapAlarm()
    assert alarm.observe(used(0.82), TOTAL, 0.0) is not None
    # hovering around 80 %: no line per read
    assert [alarm.observe(used(s), TOTAL, 1.0) for s in (0.79, 0.81, 0.76, 0.8)] == [None] * 4
    back = alarm.observe(used(0.6), TOTAL, 2.0)
    assert back is not None and back.level == logging.INFO
    assert "back to 60%" in back.text and "under 75%" in back.text
    assert alarm.observe(used(0.5), TOTAL, 3.0) is None
    again = alarm.observe(used(0.81), TOTAL, 4.0)
    assert again is not None and again.level == logging.WARNING


def test_a_heap_of_no_size_says_nothing() -> None:
    assert HeapAlarm().observe(0, 0, 0.0) is None


# ---- the watch -------------------------------------------------------------------------------

class FakeHeap:
    """`MainHeap` answering the readings queued, None for an unreadable segment."""

    def __init__(self, *readings: tuple[int, int] | None) -> None:
        self.readings = list(readings)

    def main_heap(self) -> tuple[int, int] | None:
        return self.readings.pop(0)


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]


def test_the_watch_keeps_the_last_reading_and_logs_crossings_only(
        caplog: pytest.LogCaptureFixture) -> None:
    readings = [(used(s), TOTAL) for s in (0.5, 0.85, 0.9, 0.7)]
    now = iter([0.0, 10.0, 20.0, 30.0])
    watch = HeapWatch(FakeHeap(*readings), "/run/vpp/stats.sock", clock=lambda: next(now))
    assert watch.last() is None
    with caplog.at_level(logging.INFO, logger="agent.dataplane.vpp.heap"):
        for reading in readings:
            assert watch.loop.step() == 10.0
            assert watch.last() == reading
    assert [level for level, _ in lines(caplog)] == [logging.WARNING, logging.INFO]


def test_an_unreadable_segment_is_one_warning_and_no_reading(
        caplog: pytest.LogCaptureFixture) -> None:
    watch = HeapWatch(FakeHeap((used(0.5), TOTAL), None, None, None, (used(0.5), TOTAL)),
                      "/run/vpp/stats.sock")
    with caplog.at_level(logging.INFO, logger="agent.dataplane.vpp.heap"):
        watch.loop.step()
        for _ in range(3):
            watch.loop.step()
            assert watch.last() is None  # the heap of a VPP that is gone says nothing
        watch.loop.step()
    assert watch.last() == (used(0.5), TOTAL)
    said = lines(caplog)
    assert [level for level, _ in said] == [logging.WARNING, logging.INFO], said
    assert "/run/vpp/stats.sock" in said[0][1] and "working again" in said[1][1]


# ---- the gauges ------------------------------------------------------------------------------

def scraped(metrics: Metrics) -> dict[str, list[float]]:
    return {f.name: [s.value for s in f.samples]
            for f in text_string_to_metric_families(metrics.render())
            if f.name.startswith("vswitch_cni_vpp_main_heap")}


def test_the_gauges_have_no_sample_until_the_heap_is_read() -> None:
    metrics = Metrics()
    watch = HeapWatch(FakeHeap((75144176, 536870912), None), "/run/vpp/stats.sock")
    heap_gauges(metrics, watch)
    empty: list[float] = []
    assert scraped(metrics) == {"vswitch_cni_vpp_main_heap_used_bytes": empty,
                                "vswitch_cni_vpp_main_heap_size_bytes": empty}
    watch.loop.step()
    assert scraped(metrics) == {"vswitch_cni_vpp_main_heap_used_bytes": [75144176.0],
                                "vswitch_cni_vpp_main_heap_size_bytes": [536870912.0]}
    watch.loop.step()  # unreadable now
    assert scraped(metrics) == {"vswitch_cni_vpp_main_heap_used_bytes": empty,
                                "vswitch_cni_vpp_main_heap_size_bytes": empty}


# ---- the segment -----------------------------------------------------------------------------

class FakeSegment:
    """A mapped segment as vpp-papi's VPPStats answers it (the heap's names only)."""

    def __init__(self, used: int, total: int) -> None:
        self.counters = {HEAP_USED: [used], HEAP_TOTAL: [total]}
        self.connected = True

    def get_counter(self, name: str) -> list[int]:
        if not self.connected:
            raise OSError("read through a closed mapping")
        return self.counters[name]

    def disconnect(self) -> None:
        self.connected = False


class Vpp:
    """Binds the stats socket as VPP does at start (a new file each time) and hands out its
    segment."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.heap = (used(0.1), TOTAL)
        self.mapped: list[FakeSegment] = []
        self._sock: socket.socket | None = None

    def start(self, total: int) -> None:
        self.stop()
        self.heap = (used(0.1), total)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock.bind(self.path)

    def stop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            os.unlink(self.path)
            self._sock = None

    def open_segment(self, path: str) -> FakeSegment:
        assert path == self.path
        self.mapped.append(FakeSegment(*self.heap))
        return self.mapped[-1]


def test_the_segment_is_mapped_anew_for_a_new_vpp_and_answers_none_without_one(
        tmp_path: Path) -> None:
    vpp = Vpp(stats_socket(str(tmp_path / "api.sock")))
    assert vpp.path == str(tmp_path / "stats.sock")
    segment = StatsSegment(vpp.path, open_segment=vpp.open_segment)
    assert segment.main_heap() is None and vpp.mapped == []  # no VPP yet
    vpp.start(TOTAL)
    assert segment.main_heap() == (used(0.1), TOTAL)
    assert segment.main_heap() == (used(0.1), TOTAL) and len(vpp.mapped) == 1  # reused
    vpp.start(2 * TOTAL)  # restarted with a larger heap: the old mapping would still answer
    assert segment.main_heap() == (used(0.1), 2 * TOTAL)
    assert len(vpp.mapped) == 2 and not vpp.mapped[0].connected
    vpp.mapped[1].counters.clear()  # a read that fails: None, and the next read maps again
    assert segment.main_heap() is None and not vpp.mapped[1].connected
    assert segment.main_heap() == (used(0.1), 2 * TOTAL) and len(vpp.mapped) == 3
    vpp.stop()
    assert segment.main_heap() is None and not vpp.mapped[2].connected
    segment.close()

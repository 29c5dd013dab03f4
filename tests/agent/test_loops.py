"""The supervised loop (agent/infra/loops): one run at a time with `step()`, the thread only where
threads are the point (start, wake, stop). No test waits for a timer: the sleeps are an hour long
and must be cut short.

Plan: a run that succeeds waits `interval`; failures back off (doubling, capped, never below the
interval) and are forgiven by the next success; an error is logged once however often it repeats
(one line when expected, with its traceback when not), a new one again, the recovery once; the
thread runs at once when asked to, a wake runs it again now, a failing body does not end it, and
stop cuts the sleep, interrupts a blocked body and joins, from outside or from the body itself.
Debounce (virtual time): a run after a quiet spell waits nothing, one within `seconds` of the
last run's end waits `seconds`, zero never waits.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from agent.infra.loops import Debounce, SupervisedLoop


class Body:
    """Fails with the queued errors first, then succeeds; counts and signals its runs."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.runs = 0
        self.ran = threading.Event()

    def __call__(self) -> None:
        self.runs += 1
        self.ran.set()
        if self.errors:
            raise self.errors.pop(0)


def test_a_run_that_succeeds_waits_the_interval() -> None:
    loop = SupervisedLoop("t", Body(), 1.5)
    assert loop.step() == 1.5 and loop.error == ""


def test_failures_back_off_up_to_the_cap_and_a_success_forgives_them() -> None:
    body = Body(*[OSError("down")] * 7)
    loop = SupervisedLoop("t", body, 0.0, backoff=(0.2, 2.0))
    delays = [loop.step() for _ in range(7)]
    assert delays == pytest.approx([0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0])
    assert loop.error == "down"
    assert loop.step() == 0.0 and loop.error == ""
    body.errors = [OSError("down")]
    assert loop.step() == pytest.approx(0.2)  # a new run of failures starts from the bottom


def test_the_backoff_never_shortens_the_interval() -> None:
    loop = SupervisedLoop("t", Body(OSError("a"), OSError("b")), 1.0, backoff=(0.2, 5.0))
    assert [loop.step(), loop.step()] == [1.0, 1.0]


def test_an_error_is_logged_once_however_often_it_repeats(caplog: pytest.LogCaptureFixture) -> None:
    body = Body(*[ConnectionError("etcd away")] * 3, KeyError("bug"))
    loop = SupervisedLoop("t", body, 1.0, expected=(ConnectionError,))
    with caplog.at_level(logging.DEBUG, logger="agent.infra.loops"):
        for _ in range(5):
            loop.step()
    loud = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert [r.levelname for r in loud] == ["WARNING", "ERROR", "INFO"]
    assert "etcd away" in loud[0].getMessage() and loud[0].exc_info is None
    assert loud[1].exc_info is not None  # not expected: a bug, with its traceback
    assert "after 4 failed runs" in loud[2].getMessage()


def test_the_thread_runs_at_once_when_asked_and_again_on_wake() -> None:
    body = Body()
    loop = SupervisedLoop("t-wake", body, 3600.0, immediately=True)
    loop.start()
    try:
        assert body.ran.wait(10)
        body.ran.clear()
        loop.wake()
        assert body.ran.wait(10) and body.runs == 2
    finally:
        loop.stop()


def test_a_failing_body_does_not_end_the_thread() -> None:
    body = Body(RuntimeError("one"), RuntimeError("two"))
    loop = SupervisedLoop("t-fail", body, 0.0, immediately=True, backoff=(0.0, 0.0))
    loop.start()
    try:
        deadline = time.monotonic() + 10
        while body.runs < 3:
            assert time.monotonic() < deadline and loop.running
            time.sleep(0.01)
    finally:
        loop.stop()
    assert not loop.running and loop.error == ""


def test_stop_cuts_the_sleep_interrupts_the_body_and_joins() -> None:
    release = threading.Event()
    entered = threading.Event()

    def blocked() -> None:  # a body waiting on I/O, e.g. a watch stream
        entered.set()
        release.wait(3600)

    loop = SupervisedLoop("t-stop", blocked, 3600.0, immediately=True, interrupt=release.set)
    loop.start()
    assert entered.wait(10)
    started = time.monotonic()
    loop.stop()
    assert time.monotonic() - started < 5 and not loop.running


def test_stop_from_the_body_itself() -> None:
    loop: SupervisedLoop

    def body() -> None:
        loop.stop()

    loop = SupervisedLoop("t-self", body, 3600.0, immediately=True)
    loop.start()
    assert loop.stopping.wait(10)
    loop.stop()
    assert not loop.running


def test_a_loop_is_started_once() -> None:
    loop = SupervisedLoop("t-twice", Body(), 3600.0)
    loop.start()
    try:
        with pytest.raises(RuntimeError):
            loop.start()
    finally:
        loop.stop()


def test_debounce_waits_only_when_the_last_run_ended_within_it() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    debounce = Debounce(0.05, clock=lambda: now[0], sleep=sleep)
    assert debounce.wait() == 0.0  # never ran: a quiet node applies at once
    now[0] += 0.01  # the run's work
    debounce.done()
    now[0] += 0.01  # an event during or just after it: the burst waits
    assert debounce.wait() == 0.05
    debounce.done()
    now[0] += 0.05  # exactly `seconds` later: still the same burst
    assert debounce.wait() == 0.05
    debounce.done()
    now[0] += 0.06  # quiet for longer than `seconds`: at once again
    assert debounce.wait() == 0.0
    assert slept == [0.05, 0.05]
    never = Debounce(0, clock=lambda: now[0], sleep=sleep)
    never.done()
    assert never.wait() == 0.0 and slept == [0.05, 0.05]

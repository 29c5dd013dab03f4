"""agent/infra/health: what /readiness, CNI STATUS and the `_up` gauges read instead of asking etcd
or the vswitch per request (issue #23, defect 1).

Test plan:
- a probe answers its last check: up, or down with the check's reason (an exception's text, or
  "no answer" for False); "not checked yet" before the first;
- a probe that has not succeeded for `stale_after` is down even though its last check did not
  fail (a check hanging on a stopped etcd);
- the newest attempt wins: a check that began before a later success and fails after it does not
  undo it;
- the probe's thread checks again and again, and stop() ends it;
- the probe as the observer of the CNI path's etcd client (a real etcd and a port nobody listens
  on): the store's own calls report to it, unreachable down at once, answered up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from agent.infra.health import Probe
from agent.model.errors import TryAgainLater
from agent.state.store import Store
from testbed.etcd import free_port


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Check:
    """A check whose answer the test sets: True, False or an exception to raise."""

    def __init__(self) -> None:
        self.answer: bool | Exception = True
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_a_probe_answers_its_last_check() -> None:
    clock, check = Clock(), Check()
    probe = Probe("etcd", check, clock=clock)
    assert probe.state() == (False, "not checked yet")
    probe.refresh()
    assert probe.state() == (True, "") and probe.up
    check.answer = TryAgainLater("etcd is unreachable", "127.0.0.1:2379: refused")
    probe.refresh()
    assert probe.state() == (False, "etcd is unreachable: 127.0.0.1:2379: refused")
    check.answer = False
    probe.refresh()
    assert probe.state() == (False, "no answer")
    check.answer = True
    probe.refresh()
    assert probe.up
    assert check.calls == 4  # state() never checks


def test_no_success_for_too_long_is_down() -> None:
    clock, check = Clock(), Check()
    probe = Probe("etcd", check, stale_after=5.0, clock=clock)
    probe.refresh()
    clock.now += 4.0
    assert probe.up
    clock.now += 2.0  # the next check hangs: nothing new, and too old now
    up, reason = probe.state()
    assert not up and reason == "no answer for 6 s"


def test_the_newest_attempt_wins() -> None:
    clock = Clock()
    probe = Probe("dataplane", Check(), clock=clock)
    slow_started = clock.now
    clock.now += 1.0
    probe.report(True, "", clock.now)  # a later attempt (the watch, after a reconnect) succeeded
    probe.report(False, "connection reset", slow_started)  # the older one ends, failed
    assert probe.up
    probe.report(False, "gone", clock.now + 0.5)
    assert probe.state() == (False, "gone")


def test_the_probe_thread_checks_until_stopped() -> None:
    check = Check()
    probe = Probe("etcd", check, interval=0.01)
    probe.start()
    try:
        assert wait_until(lambda: check.calls >= 3)
        assert probe.up
    finally:
        probe.stop()
    calls = check.calls
    time.sleep(0.05)
    assert check.calls == calls
    assert not any(t.name == "probe-etcd" for t in threading.enumerate())


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_the_cni_paths_own_calls_report_to_the_etcd_probe(etcd_endpoints: list[str]) -> None:
    nobody = Store([f"http://127.0.0.1:{free_port()}"], "/health-test/", 0.5)
    store = Store(etcd_endpoints, "/health-test/", 2.0)
    down = Probe("etcd", lambda: None)
    up = Probe("etcd", lambda: None)
    nobody.etcd.observer, store.etcd.observer = down, up
    try:
        with pytest.raises(TryAgainLater):
            nobody.node_ids()  # any call of the CNI path, not only the probe's ping
        assert not down.up and "unreachable" in down.state()[1]
        assert store.node_ids() == {} and up.up
    finally:
        nobody.close()
        store.close()

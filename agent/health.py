"""Health from background probes: what /readiness, CNI STATUS and the `_up` gauges read.

Each `Probe` runs its check in a thread of its own at a fixed interval and keeps the last answer;
readers take that answer and never wait. Before, every scrape and every /readiness pinged etcd
through the client the CNI path uses (and a VPP agent's control_ping through its VPP connection):
200 clients looping on /metrics made ADDs fail with "etcd is unreachable" while etcd was healthy
(issue #23). Now the load a probe puts on etcd or VPP is one call per interval, whatever the
number of readers.

A probe reports down when its last check failed, and also when no check has succeeded for
`stale_after` seconds: a check that hangs (etcd stopped, its requests waiting in the socket until
the client's timeout) turns the answer to down without waiting for that timeout.

The etcd probe also hears the agent's own traffic (`ObservedStore`, the CNI path's client): a
call that finds etcd unreachable turns it down at once, the next that succeeds up again, so that
readiness never says ready between an ADD that failed on etcd and the next call that got through.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from agent.errors import TryAgainLater
from agent.store import Store

T = TypeVar("T")

log = logging.getLogger(__name__)

PROBE_INTERVAL = 1.0  # seconds between two checks of one probe
STALE_AFTER = 5.0  # seconds without a successful check after which a probe reports down


class Probe:
    """A yes/no condition, checked by its own thread every `interval` seconds.

    `check` raises (any exception: its text is the reason) or returns False when the condition
    does not hold (anything else, None too, is up); it should have its own timeout."""

    def __init__(self, name: str, check: Callable[[], bool | None],
                 interval: float = PROBE_INTERVAL, stale_after: float = STALE_AFTER,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._check = check
        self.interval = interval
        self.stale_after = stale_after
        self._clock = clock
        self._lock = threading.Lock()
        self._last_ok: float | None = None  # when a check last succeeded
        self._reason = "not checked yet"  # why the last check failed; "" when it succeeded
        self._observed_at = float("-inf")  # when the attempt behind the last answer began
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"probe-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=1)  # a check stuck in its timeout is a daemon: not waited
            self._thread = None

    def now(self) -> float:
        return self._clock()

    def refresh(self) -> None:
        """Checks once now, in the caller's thread (start-up: the first answer before ready)."""
        started = self._clock()
        try:
            ok = self._check() is not False
            reason = "" if ok else "no answer"
        except Exception as exc:  # a probe is a yes/no answer, never an error
            ok, reason = False, str(exc) or type(exc).__name__
        self.report(ok, reason, started)

    def report(self, ok: bool, reason: str = "", started: float | None = None) -> None:
        """An outcome, of a check or seen elsewhere (the agent's own traffic), observed by an
        attempt that began at `started` (now if not given). The newest attempt wins: a slow
        check that began before a later success (a reconnect in between) does not undo it."""
        if not ok and not reason:
            reason = "no answer"
        with self._lock:
            at = self._clock() if started is None else started
            if at < self._observed_at:
                return
            self._observed_at = at
            was_up = not self._reason
            if ok:
                self._last_ok = self._clock()
            self._reason = reason
        # Changes only, so that a long outage is two lines, not one a second.
        if was_up and not ok:
            log.warning("%s probe: down: %s", self.name, reason)
        elif not was_up and ok and self._last_ok is not None:
            log.info("%s probe: up", self.name)

    def state(self) -> tuple[bool, str]:
        """(up, reason): the last answer, never waiting for a check."""
        with self._lock:
            last_ok, reason = self._last_ok, self._reason
        if reason:
            return False, reason
        assert last_ok is not None
        age = self._clock() - last_ok
        if age > self.stale_after:
            return False, f"no answer for {age:.0f} s"
        return True, ""

    @property
    def up(self) -> bool:
        return self.state()[0]

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.refresh()
            self._stopping.wait(self.interval)


class ObservedStore(Store):
    """The CNI path's Store, telling `probe` the outcome of each of its etcd calls: unreachable
    (TryAgainLater) or answered. Other failures (IOFailure: etcd answered, with an error) say
    nothing about reachability."""

    probe: Probe | None = None

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        probe = self.probe
        started = probe.now() if probe is not None else 0.0
        try:
            result = super()._call(what, fn)
        except TryAgainLater as exc:
            if probe is not None:
                probe.report(False, str(exc), started)
            raise
        if probe is not None:
            probe.report(True, "", started)
        return result

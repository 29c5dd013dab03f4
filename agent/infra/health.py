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

The etcd probe also hears the agent's own traffic (it is the observer of the CNI path's etcd
client, agent/state/etcd_client): a call that finds etcd unreachable turns it down at once, the
next that succeeds up again, so that readiness never says ready between an ADD that failed on
etcd and the next call that got through.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from agent.infra.loops import SupervisedLoop

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
        # refresh never raises (a failed check is an answer), so the loop never backs off
        self._loop = SupervisedLoop(f"probe-{name}", self.refresh, interval, immediately=True,
                                    log=log)

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop(timeout=1)  # a check stuck in its timeout is a daemon: not waited

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

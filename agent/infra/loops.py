"""Supervised background loops: the one way the agent runs work beside the request path.

A `SupervisedLoop` is a named daemon thread that runs a body every `interval` seconds (the first
run at once or after one interval) until `stop()`. The body may raise: the loop never dies of it.
Each distinct error is logged once (one line for an `expected` error, such as etcd being away;
with its traceback otherwise, as a bug), repeats go to debug, and the first success after
failures says so. After a failure the next run waits at least the backoff, which doubles from
`backoff[0]` up to `backoff[1]` while the failures go on, so a dead peer is not hammered.

`stop()` wakes the sleep at once, calls `interrupt` (for a body blocked in I/O, such as a watch
stream: it makes the body return) and joins the thread; `wake()` runs the body now instead of
at the end of the sleep. `step()` is one run in the caller's thread and returns the delay the
thread would sleep next: tests drive a loop with it, without threads or timers.

A `Debounce` is what a loop woken by events waits before its body, so that a burst of events
costs one run: nothing when the last run ended more than `seconds` ago (a change on a quiet
node takes effect at once), else `seconds` (the events of a burst that came in meanwhile are
taken together).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

_log = logging.getLogger(__name__)


class SupervisedLoop:
    """`body` every `interval` seconds in a thread called `name`, until `stop()`."""

    def __init__(
        self,
        name: str,
        body: Callable[[], object],
        interval: float,
        *,
        immediately: bool = False,
        backoff: tuple[float, float] = (0.2, 5.0),
        expected: tuple[type[BaseException], ...] = (),
        interrupt: Callable[[], None] | None = None,
        log: logging.Logger | None = None,
    ) -> None:
        self.name = name
        self.interval = interval
        self.immediately = immediately
        self._body = body
        self._backoff_min, self._backoff_max = backoff
        self._expected = expected
        self._interrupt = interrupt
        self._log = log or _log
        self.stopping = threading.Event()  # set by stop(); a long body may watch it
        self._wake = threading.Event()  # ends the current sleep (stop or wake)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # guards the error state below against readers
        self._delay = 0.0  # the backoff of the current run of failures; 0: none
        self._failures = 0
        self._logged = ""  # the error last logged: the same one again goes to debug
        self._error = ""

    # ---- the thread ------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"loop {self.name} started twice")
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Ends the loop: the sleep ends at once, a running body is interrupted (when the loop
        was given a way to) and the thread joined for up to `timeout` seconds."""
        self.stopping.set()
        self._wake.set()
        if self._interrupt is not None:
            self._interrupt()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return
        thread.join(timeout)
        if thread.is_alive():  # a body stuck in a call without a timeout: a daemon, left
            self._log.warning("%s: did not stop within %.0fs", self.name, timeout)

    def wake(self) -> None:
        """Runs the body as soon as the current run (if any) is over, not after the sleep."""
        self._wake.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        delay = 0.0 if self.immediately else self.interval
        while not self.stopping.is_set():
            self._wake.wait(delay)
            # cleared before the body runs: a wake() during the run makes the next sleep short
            self._wake.clear()
            if self.stopping.is_set():
                return
            delay = self.step()

    # ---- one run ---------------------------------------------------------------------------

    def step(self) -> float:
        """Runs the body once, here; returns the seconds until the next run."""
        try:
            self._body()
        except Exception as exc:  # the loop outlives any one failure: logged, backed off
            return self._failed(exc)
        self._succeeded()
        return self.interval

    @property
    def error(self) -> str:
        """The last run's error, "" when it succeeded (or none ran yet)."""
        with self._lock:
            return self._error

    def _failed(self, exc: Exception) -> float:
        text = f"{type(exc).__name__}: {exc}"
        with self._lock:
            self._failures += 1
            self._error = str(exc) or type(exc).__name__
            self._delay = min(self._delay * 2, self._backoff_max) if self._delay \
                else self._backoff_min
            delay = max(self.interval, self._delay)
            repeated, self._logged = text == self._logged, text
        if repeated:
            self._log.debug("%s: %s (again); retrying in %.1fs", self.name, text, delay)
        elif isinstance(exc, self._expected):
            self._log.warning("%s: %s; retrying in %.1fs", self.name, exc, delay)
        else:
            self._log.error("%s failed; retrying in %.1fs", self.name, delay, exc_info=exc)
        return delay

    def _succeeded(self) -> None:
        with self._lock:
            failures, last = self._failures, self._logged
            self._failures, self._delay, self._logged, self._error = 0, 0.0, "", ""
        if failures:
            self._log.info("%s: working again after %d failed runs (last: %s)", self.name,
                           failures, last)


class Debounce:
    """Leading-edge debounce for a woken loop's body (see the module docstring): `wait()`
    before the work, `done()` after it. `clock` and `sleep` are for tests."""

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], object] = time.sleep) -> None:
        self.seconds = seconds
        self._clock, self._sleep = clock, sleep
        self._ended = float("-inf")

    def wait(self) -> float:
        """Sleeps when the last run ended within `seconds`; returns the seconds slept."""
        if self.seconds <= 0 or self._clock() - self._ended > self.seconds:
            return 0.0
        self._sleep(self.seconds)
        return self.seconds

    def done(self) -> None:
        self._ended = self._clock()

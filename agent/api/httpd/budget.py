"""What agent/api/httpd spends, metered: token buckets (the slow lane's rate, REST's CPU) and log
lines that a client cannot multiply."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("agent.api.httpd")


class Bucket:
    """A token bucket: `per_second` tokens a second, at most `burst` kept. `take(amount)` takes
    them (the level may go below zero: a debt) and says how long the caller should wait until the
    level is back at zero. Thread-safe."""

    def __init__(self, per_second: float, burst: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second = per_second
        self.burst = burst
        self._clock = clock
        self._level = burst
        self._at = clock()
        self._lock = threading.Lock()

    def take(self, amount: float = 1.0) -> float:
        with self._lock:
            now = self._clock()
            self._level = min(self.burst, self._level + (now - self._at) * self.per_second)
            self._at = now
            self._level -= amount
            return 0.0 if self._level >= 0 else -self._level / self.per_second


class Throttled:
    """One line per `every` seconds at most (DEBUG unless told), counting the events it left
    out. Only the loop thread calls it: no lock."""

    def __init__(self, what: str, every: float = 1.0, level: int = logging.DEBUG) -> None:
        self.what = what
        self.every = every
        self.level = level
        self._last = -every
        self._left_out = 0

    def note(self, detail: str, exc_info: bool = False) -> None:
        now = time.monotonic()
        if now - self._last < self.every:
            self._left_out += 1
            return
        more = f" ({self._left_out} more since the last such line)" if self._left_out else ""
        log.log(self.level, "REST: %s: %s%s", self.what, detail, more, exc_info=exc_info)
        self._last, self._left_out = now, 0

"""Retrying a start-up step while a peer (etcd, VPP) is not up yet, with one backoff for all.

On a booting node etcd, VPP and the agent start in any order; an agent that gave up at the first
refusal would crash-loop. A step is retried while it raises TryAgainLater, 0.2 s after the first
try and up to 2 s between tries, for at most `wait` seconds; a set `stopping` ends the wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from agent.model.errors import TryAgainLater

T = TypeVar("T")


def retry_unavailable(
    step: Callable[[], T],
    wait: float,
    stopping: threading.Event | None,
    on_wait: Callable[[TryAgainLater, float], None],
) -> T:
    """`step()`'s result; its TryAgainLater again once `wait` seconds are over or `stopping` is
    set. `on_wait(error, seconds left)` is told of every retry (to log it)."""
    deadline = time.monotonic() + wait
    delay = 0.2
    stop = stopping if stopping is not None else threading.Event()
    while True:
        try:
            return step()
        except TryAgainLater as exc:
            left = deadline - time.monotonic()
            if left <= 0 or stop.is_set():
                raise
            on_wait(exc, left)
            if stop.wait(min(delay, left)):
                raise
            delay = min(delay * 2, 2.0)

"""What one REST client, and all of them together, may cost: the bounds agent/api/httpd holds
(docs/config.md, the HTTP* keys; docs/rest-api.md, why)."""

from __future__ import annotations

from dataclasses import dataclass

LINGER = 2.0  # seconds an error reply's connection is drained before closing (see _linger)
LINGER_BYTES = 1 << 20  # ... and at most this much of the client's unread request discarded
ACCEPT_BATCH = 64  # connections accepted per loop turn: the loop keeps serving the others
ACCEPT_PAUSE = 0.1  # seconds a listener is not watched after accept() failed (EMFILE)
ABORTED = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, TimeoutError)
SLOW_RATE = 5.0  # slow-lane requests a second (a burst of as many first): an operator's pace
SLOW_QUEUE = 8  # slow-lane requests waiting or served at once; more are answered 503 at once
# The share of one core that all REST threads together may use, over time (a burst of CPU_BURST
# CPU-seconds first). The agent is one Python process: a REST thread that runs holds the GIL the
# CNI threads need, and an ADD takes the GIL back after each of its many I/O waits, so the time
# REST holds it adds to every ADD. A tenth of a core is still about 200 scrapes a second, far
# more than probes and Prometheus ask. Beyond it REST pauses (its clients wait in the kernel's
# queues) and the CNI path keeps the CPU.
CPU_SHARE = 0.1
CPU_BURST = 0.25


@dataclass(frozen=True)
class Limits:
    """What one client, and all of them together, may cost (docs/config.md, HTTP* keys)."""

    workers: int = 4
    max_connections: int = 64
    header_timeout: float = 5.0
    cpu_share: float = CPU_SHARE

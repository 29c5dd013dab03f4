"""Failpoints: named places in the pod lifecycle where a test can make the agent die.

The fault-injection suite (tests/faults) starts the real agent with `VSWITCH_FAILPOINTS` set to
a comma-separated list of names below; the first time the agent passes an armed point it kills
itself with SIGKILL, exactly as the OOM killer or a node's power loss would: no cleanup, no
flush. Unset (production), `hit` is one frozenset lookup.

Names are step boundaries: ``add:<step>`` after that ADD step has finished (allocate, record,
wire, podside, commit), ``del:<step>`` after that DEL step (detach, delete, release).
"""

from __future__ import annotations

import logging
import os
import signal

ENV = "VSWITCH_FAILPOINTS"
ADD_POINTS = ("add:allocate", "add:record", "add:wire", "add:podside", "add:commit")
DEL_POINTS = ("del:detach", "del:delete", "del:release")

log = logging.getLogger(__name__)
_armed = frozenset(p.strip() for p in os.environ.get(ENV, "").split(",") if p.strip())


def hit(name: str) -> None:
    """Dies here when `name` is armed; otherwise does nothing."""
    if name in _armed:
        log.warning("failpoint %s: killing the agent (SIGKILL)", name)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)

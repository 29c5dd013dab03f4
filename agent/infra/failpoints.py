"""Failpoints: named places in the pod lifecycle where a test can make the agent fail.

The fault-injection suite (tests/faults) starts the real agent with `VSWITCH_FAILPOINTS` set to
a comma-separated list of `name` or `name=action` (names below). The first time the agent passes
an armed point it performs the action:
- `kill` (the default): SIGKILL, exactly as the OOM killer or a node's power loss would: no
  cleanup, no flush;
- `stop`: SIGSTOP of the whole agent, so that the test can change the world at that exact moment
  (freeze etcd, say) and then SIGCONT the agent;
- `hang`: the thread passing the point blocks for ever (a worker stuck in a request).
Unset (production), `hit` is one dict lookup.

Names are step boundaries: ``add:<step>`` after that ADD step has finished (allocate, record,
wire, podside, commit), ``del:<step>`` after that DEL step (detach, delete, release). Inside the
VPP dataplane's detach: ``del:vpp-unrouted`` after the pod's routes and neighbors are gone,
``del:vpp-afpacket`` after its AF_PACKET interface is gone (the veth still there).
"""

from __future__ import annotations

import logging
import os
import signal
import threading

ENV = "VSWITCH_FAILPOINTS"
ADD_POINTS = ("add:allocate", "add:record", "add:wire", "add:podside", "add:commit")
DEL_POINTS = ("del:detach", "del:delete", "del:release")
VPP_DEL_POINTS = ("del:vpp-unrouted", "del:vpp-afpacket")
ACTIONS = ("kill", "stop", "hang")

log = logging.getLogger(__name__)


def _parse(spec: str) -> dict[str, str]:
    armed: dict[str, str] = {}
    for item in spec.split(","):
        name, _, action = item.strip().partition("=")
        if name:
            armed[name] = action.strip() or "kill"
    return armed


_armed = _parse(os.environ.get(ENV, ""))
_lock = threading.Lock()


def hit(name: str) -> None:
    """Performs the action armed at `name` the first time it is passed; else does nothing."""
    if name not in _armed:
        return
    with _lock:
        action = _armed.pop(name, None)
    if action is None:
        return
    log.warning("failpoint %s: %s", name, action)
    for handler in logging.getLogger().handlers:
        handler.flush()
    if action == "stop":
        # To this thread: a process-wide SIGSTOP is taken by the main thread, and this one
        # would run on (say, send the next etcd request) until the group stop reaches it.
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    elif action == "hang":
        threading.Event().wait()
    else:
        os.kill(os.getpid(), signal.SIGKILL)

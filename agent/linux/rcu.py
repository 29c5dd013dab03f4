"""The kernel's RCU grace periods, normal or expedited (`ExpediteKernelRcu`, docs/vpp.md).

A VPP dataplane ADD in veth + AF_PACKET mode waits for the kernel three times: VPP binds its
AF_PACKET socket and sets up its receive and its transmit ring, and `packet_do_bind` and each
`packet_set_ring` wait for a full RCU grace period (`synchronize_net()` without RTNL held; seen
with perf in VPP's main thread). With normal grace periods `af_packet_create_v3` held VPP's main
thread ~40 ms here, with expedited ones ~6 ms (BENCHMARKS.md, "VPP ADD and the kernel's RCU
grace periods"). Expedited grace periods (/sys/kernel/rcu_expedited = 1, or the boot parameter
rcupdate.rcu_expedited=1) interrupt the busy CPUs with an IPI each time, which is why they are
not the kernel's default and not the agent's: the knob is machine-wide, the operator asks.

Moving a link between namespaces (the pod pool's spare into its pod) ends in `rcu_barrier()`,
which expediting does not shorten: with expedited grace periods a pair made in the ADD is
faster than a spare moved in, so VppPodPool's default follows what this module reads.
"""

from __future__ import annotations

import logging
import os

KNOB = "/sys/kernel/rcu_expedited"

log = logging.getLogger(__name__)


def expedited(knob: str = KNOB) -> bool:
    """Whether the kernel expedites its grace periods now (False where it has no such knob)."""
    try:
        with open(knob) as f:
            return f.read().strip() not in ("", "0")
    except OSError:
        return False


def expedite(knob: str = KNOB) -> bool:
    """Turns expedited grace periods on, machine-wide, until reboot or until someone writes 0.
    Returns whether they are on now; a knob that cannot be written (no such file, /sys
    read-only in an unprivileged container) is logged, not raised: the agent serves pods
    either way, only its VPP ADDs are slower."""
    if expedited(knob):
        return True
    try:
        fd = os.open(knob, os.O_WRONLY)
        try:
            os.write(fd, b"1")
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning("ExpediteKernelRcu: cannot write %s (%s); VPP's AF_PACKET creates and "
                    "deletes keep waiting for normal RCU grace periods", knob, exc.strerror)
        return False
    log.info("ExpediteKernelRcu: the kernel now expedites RCU grace periods (%s = 1)", knob)
    return expedited(knob)

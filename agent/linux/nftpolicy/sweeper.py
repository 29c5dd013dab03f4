"""The kernel renderer's conntrack sweeps: after a change, the tracked connections it now
denies are deleted (conntrack.sweep), at once in the caller's thread, or queued for a thread of
its own (the agent: a sweep reads the node's whole conntrack table, up to seconds on a busy
node, and must not hold up the next change or a pod's ADD). The thread works in the network
namespace whose descriptor it is given, and judges each connection by the rules installed when
it runs (a later change queues its addresses again)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from agent.infra.loops import SupervisedLoop
from agent.linux.netns import enter_netns
from agent.linux.nft import table_lock
from agent.linux.nftpolicy import conntrack
from agent.linux.nftpolicy.render import PodRules
from agent.linux.nftpolicy.verdict import allowed
from policy.model import IPAddress

log = logging.getLogger(__name__)


class Sweeper:
    """`rules`: the installed rules by pod address (called holding `table_lock`)."""

    def __init__(self, rules: Callable[[], Mapping[IPAddress, PodRules]], *, enabled: bool,
                 background: bool, netns_fd: int) -> None:
        self._rules = rules
        self._enabled, self._background, self._netns_fd = enabled, background, netns_fd
        self._pending: set[IPAddress] = set()
        self._lock = threading.Lock()
        self._loop: SupervisedLoop | None = None  # runs when woken (and hourly: a no-op)
        self._entered = False
        self.swept = 0  # what the thread deleted

    def sweep(self, addresses: Sequence[IPAddress]) -> int:
        """Sweeps `addresses`' connections; returns how many were deleted (0 in the
        background: `swept` counts them)."""
        if not self._enabled or not addresses:
            return 0
        if not self._background:
            return self._now(addresses, self._rules())
        with self._lock:
            self._pending.update(addresses)
            if self._loop is None:
                self._loop = SupervisedLoop("conntrack-sweep", self._run, 3600.0,
                                            immediately=True, log=log)
                self._loop.start()
                return 0
        self._loop.wake()
        return 0

    def close(self) -> None:
        """Ends the thread (a sweep under way finishes first)."""
        if self._loop is not None:
            self._loop.stop(timeout=10)

    def _run(self) -> None:
        if not self._entered:
            enter_netns(self._netns_fd)  # the loop's thread, for good
            self._entered = True
        with self._lock:
            addresses, self._pending = sorted(self._pending, key=str), set()
        if not addresses:
            return
        with table_lock:
            by_address = self._rules()
        self.swept += self._now(addresses, by_address)

    def _now(self, addresses: Sequence[IPAddress],
             by_address: Mapping[IPAddress, PodRules]) -> int:
        try:
            return conntrack.sweep(addresses, lambda flow: allowed(by_address, flow))
        except Exception as exc:  # the rules stand: say what was left undone, go on
            log.warning("conntrack sweep failed (connections established before the change "
                        "may outlive it): %s", exc)
            return 0

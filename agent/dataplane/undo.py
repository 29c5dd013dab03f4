"""Undoing what a driver built: at once on a failed ADD (`UndoStack`), or in the background after a
DEL (`LinkReaper`).

`UndoStack`: every step a driver (or the ADD's lifecycle) completes pushes its inverse; a later
failure runs them newest first, and a failed ADD leaves nothing behind.

`LinkReaper` deletes retired host links in the background, so that a DEL need not wait for the
kernel.

Deleting a veth is synchronous in the kernel and slow (about 20 ms: the unregister waits for
RCU grace periods), while setting its host end down takes well under a millisecond and already
ends every use of it: the kernel drops the host routes through a link that goes down (IPv4 and
IPv6), and the pod's end loses its carrier. So the kernel driver's DEL only disables the link and
hands it here (`retire`); a worker thread deletes it shortly after, and the DEL answers at once.

A retired link still holds two names until it is gone: its host name (derived from the pod key,
so the same attachment ADDed again wants it back) and the pod's interface name inside the pod's
namespace. `settle(netns, name)` is the wait an ADD calls first: a pending delete of that host
name, or of any link retired from that namespace, is done right there by the caller (or, when
the worker is at it already, waited for). Nothing else can take those names meanwhile: the pod
lock serializes requests of one key, and only retired links are ever pending here.

The kernel driver deletes with `netlink.delete_link`; the VPP driver's veth mode passes its own
`delete` (agent/dataplane/vpp/podlinks: the link's reused name is free again only once it is
gone).

Namespaces: the driver works in its calling thread's network namespace (agent/linux/netns). The
worker enters the namespace of the first thread that retires a link; a link retired from any
other namespace (tests run drivers in several) is deleted at once by the caller instead.
`drain` deletes what is pending (agent shutdown); a link left by a killed agent is down and
still tagged, so the next start's reconcile removes it as an orphan.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from agent.linux import netlink
from agent.linux.netns import OWN_NETNS, enter_netns, own_netns_fd
from agent.model.errors import CniError

log = logging.getLogger(__name__)


class UndoStack:
    """Completed steps' inverses, run newest first when an ADD fails."""

    def __init__(self) -> None:
        self._steps: list[tuple[str, Callable[[], object]]] = []

    def push(self, what: str, undo: Callable[[], object]) -> None:
        self._steps.append((what, undo))

    def unwind(self) -> list[str]:
        """Runs every undo step; returns the descriptions of those that failed."""
        failed: list[str] = []
        while self._steps:
            what, undo = self._steps.pop()
            try:
                undo()
            except Exception as exc:  # keep unwinding, report at the end
                failed.append(f"{what}: {exc}")
        return failed

    def __len__(self) -> int:
        return len(self._steps)


@dataclass(frozen=True)
class _Retired:
    name: str
    netns: str
    due: float  # monotonic time after which the worker deletes it


class LinkReaper:
    """Pending deletes of disabled host links, and the worker that carries them out."""

    def __init__(self, delay: float = 0.0,
                 delete: Callable[[str], object] = netlink.delete_link) -> None:
        self.delay = delay  # seconds a retired link waits before the worker deletes it
        self._delete = delete  # deletes one link by name; raises CniError when it cannot
        self._cond = threading.Condition()
        self._pending: dict[str, _Retired] = {}  # by host name, oldest first
        self._busy: dict[str, _Retired] = {}  # being deleted right now (worker or a caller)
        self._ns: tuple[int, int] | None = None  # (st_dev, st_ino) of the running worker's
        self._worker: threading.Thread | None = None

    def retire(self, name: str, netns: str) -> None:
        """Hands over the disabled link `name` (its pod end was in `netns`) for deletion."""
        here = _namespace()
        with self._cond:
            if self._worker is None:
                self._start_worker(here)
            if here == self._ns:
                self._pending.pop(name, None)
                self._pending[name] = _Retired(name, netns, time.monotonic() + self.delay)
                self._cond.notify_all()
                return
        self._delete_logged(name)  # another namespace than the worker's: no deferring

    def settle(self, netns: str, name: str | None = None) -> None:
        """Returns once no retired link holds an interface in `netns` or host name `name`."""
        while True:
            with self._cond:
                due = [r for r in self._pending.values() if r.name == name or r.netns == netns]
                if not due:
                    if not any(r.name == name or r.netns == netns for r in self._busy.values()):
                        return
                    self._cond.wait()
                    continue
                self._take(due)
            self._finish(due)

    def drain(self) -> None:
        """Deletes every pending link now (in the calling thread) and waits for the worker's."""
        with self._cond:
            due = list(self._pending.values())
            self._take(due)
        self._finish(due)
        with self._cond:
            while self._busy:
                self._cond.wait()

    def pending(self) -> int:
        """Links retired and not deleted yet."""
        with self._cond:
            return len(self._pending) + len(self._busy)

    def names(self) -> set[str]:
        """The host names of the links retired and not deleted yet."""
        with self._cond:
            return set(self._pending) | set(self._busy)

    def _take(self, items: list[_Retired]) -> None:
        """Moves `items` from pending to busy (the lock is held)."""
        for item in items:
            del self._pending[item.name]
            self._busy[item.name] = item

    def _finish(self, items: list[_Retired]) -> None:
        try:
            for item in items:
                self._delete_logged(item.name)
        finally:
            with self._cond:
                for item in items:
                    self._busy.pop(item.name, None)
                self._cond.notify_all()

    def _start_worker(self, namespace: tuple[int, int]) -> None:
        """Starts a worker in the calling thread's namespace (the lock is held). It ends when
        nothing is left to do, so no idle thread keeps a namespace alive."""
        self._ns = namespace
        fd = own_netns_fd()
        self._worker = threading.Thread(target=self._run, args=(fd,), name="link-reaper",
                                        daemon=True)
        self._worker.start()

    def _run(self, nsfd: int) -> None:
        try:
            enter_netns(nsfd)  # this thread only
        except OSError as exc:  # never seen; the links wait for drain() or a later worker
            log.error("link reaper cannot enter the node's namespace: %s", exc)
            with self._cond:
                self._worker = self._ns = None
            return
        finally:
            os.close(nsfd)
        while True:
            with self._cond:
                item = self._next_due()
                if item is None:
                    self._worker = None
                    self._ns = None
                    return
                self._take([item])
            self._finish([item])

    def _next_due(self) -> _Retired | None:
        """The oldest pending link once its delay is over; None when none is left (the lock
        is held)."""
        while self._pending:
            item = next(iter(self._pending.values()))
            wait = item.due - time.monotonic()
            if wait <= 0:
                return item
            self._cond.wait(wait)
        return None

    def _delete_logged(self, name: str) -> None:
        try:
            self._delete(name)
        except CniError as exc:  # logged: a down link left over is reconcile's orphan to remove
            log.error("retired link %s not deleted: %s", name, exc)


def _namespace() -> tuple[int, int]:
    info = os.stat(OWN_NETNS)
    return info.st_dev, info.st_ino

"""Ready veth + AF_PACKET pairs for the next ADDs, and DEL's slow deletes, both in the background.

An ADD in veth + AF_PACKET mode spent most of its time in VPP's af_packet_create_v3 (~43 ms:
VPP's main thread waits in the kernel while it sets up the socket's rings), and a DEL as long in
af_packet_delete. Neither depends on the pod, so neither needs to be on the answer path:

- **Spares** (`VppPodPool` of them, issue #25): a veth pair whose host end (`<prefix><N>`, from
  the reused names of agent/dataplane/vpp/podlinks, alias `vswitch-cni/spare`) is up with VPP's
  AF_PACKET interface on it, already tagged `vswitch-cni/spare`, in the pod VRF of every family
  the node has, unnumbered to the gateway loopback, MTU set and up; the other end, the waiting
  end `<spare prefix><N>`, is up in the node's namespace without IPv6 (and without IPv4 TSO
  where the pods' TCP must come segmented). An ADD takes one (`take`) and makes the pod's
  interface a macvlan (passthru) on the waiting end, created right inside the pod's namespace
  (agent/dataplane/vpp/veth_afpacket); the loop makes a new spare. Nothing moves between
  namespaces: a move ends in the kernel's rcu_barrier() (17-24 ms), a macvlan's creation
  waits for nothing. Each spare holds its AF_PACKET rings (1.93 MiB with the defaults).
- **Retired pairs**: a DEL takes the pod's routes and neighbors out of VPP (not its interface
  down: VPP would set the veth down under its own socket), sets the waiting end down (the pod
  is cut off), tags the host end `vswitch-cni/retired` and answers. While the pool wants
  spares, the loop makes such a pair a spare again (`recycle`, agent/dataplane/vpp/pairs: the
  pod's macvlan deleted, no VPP interface made or deleted); otherwise it deletes VPP's
  AF_PACKET interface and after it the veth, which takes the pod's macvlan with it (issue
  #27's order; failpoint `del:vpp-afpacket` between the two). The pod's namespace holds only
  the macvlan, so a runtime that removes it at once takes nothing VPP is bound to. A host name
  stays reserved until its pair is gone; an ADD into a namespace whose retired macvlan is
  still there settles that pair first (`settle`: it serves again, or is deleted).

One supervised loop (agent/infra/loops) does both, deletes first, in the namespace of the thread
that started the pool. VPP answers one request at a time and an AF_PACKET create or delete holds
it ~43 ms, so the loop starts neither while a CNI request is in VPP's hands (`request`), unless
it has waited `YIELD_MAX`; an ADD that finds no spare while one is being made waits for that
one. Deletes wait for a pause of `QUIET` without requests, at most `DELETE_WAIT_MAX`, and not
at all once more than `PENDING_MAX` pairs are waiting. Spares of an older VPP connection are
deleted and made again; at start, every pair tagged spare or retired goes to the deletes (a
killed agent's spares are not trusted); `close` deletes the pending pairs and the spares.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from agent.dataplane.vpp import afpacket, interfaces, names
from agent.dataplane.vpp.api import VppApi
from agent.dataplane.vpp.pairs import PoolSettings as PoolSettings  # the pool's, for drivers
from agent.dataplane.vpp.pairs import Reuse, Spare, new_spare, spare_again
from agent.dataplane.vpp.podlinks import PodLinks
from agent.infra import failpoints
from agent.infra.loops import SupervisedLoop
from agent.linux.netns import enter_netns, own_netns_fd
from agent.model.errors import CniError

log = logging.getLogger(__name__)
UNKNOWN = -1  # generation of a pair found at start: ask VPP whether it has a socket on it
YIELD_MAX = 1.0  # seconds the loop waits for a moment without CNI requests before it goes on
QUIET = 0.2  # seconds without requests a delete waits for
DELETE_WAIT_MAX = 5.0  # seconds a delete waits for them at most
PENDING_MAX = 16  # retired pairs beyond which deletes wait for nothing
TAKES = ("ready", "waited", "empty")  # what an ADD's `take` got (vswitch_cni_vpp_pod_pool_takes)


class PodPool:
    """The spares, the retired pairs, and the loop that makes the one and deletes the other."""

    def __init__(self, api: VppApi, links: PodLinks, settings: PoolSettings,
                 gateway: Callable[[], int], interval: float = 1.0) -> None:
        self.api = api
        self.links = links
        self.cfg = settings
        self._gateway = gateway  # connected, base applied: the gateway loopback's sw_if_index
        self._lock = threading.Condition()
        self._spares: list[Spare] = []
        self._making = False  # a spare is being made (an ADD may wait for it)
        self._requests = 0  # CNI requests in VPP's hands now (the loop yields to them)
        self._last_request = 0.0  # monotonic time the last one ended
        self._retired: dict[str, int] = {}  # host -> generation its binding was known on
        self._pod_netns: dict[str, str] = {}  # retired host -> the namespace of its macvlan
        self._reuse: dict[str, Reuse] = {}  # retired hosts that may serve again (pairs.py)
        self._busy: set[str] = set()  # retired pairs being deleted right now
        # ADDs by what `take` gave them: a ready spare, the one being made (waited for), none
        self._takes = dict.fromkeys(TAKES, 0)
        self._nsfd = -1
        self._entered = False
        self._loop = SupervisedLoop("vpp-pod-pool", self._run, interval, immediately=True,
                                    expected=(CniError,), log=log)

    # ---- life ------------------------------------------------------------------------------

    def start(self, loop: bool = True) -> None:
        """Hands the pairs a killed agent left (tagged spare or retired) to the deletes, and
        starts the loop in the calling thread's namespace. Once. Without `loop` nothing runs
        in the background: the caller (a test) calls `refill` and `delete_retired` itself."""
        if self._nsfd >= 0:
            return
        found = [(host, tag) for tag in (names.SPARE_TAG, names.RETIRED_TAG)
                 for host in self.links.with_tag(tag)]
        for host, tag in found:
            log.info("pair %s (%s) of an earlier run: deleting it", host, tag)
            self._queue(host, UNKNOWN)
        self._nsfd = own_netns_fd()
        if loop:
            self._loop.start()

    def close(self) -> None:
        """Stops the loop; deletes the retired pairs and the spares here (agent shutdown).
        What VPP does not let go of now stays tagged for the next start."""
        self._loop.stop()
        with self._lock:
            spares, self._spares = self._spares, []
            reuse, self._reuse = self._reuse, {}
        for r in reuse.values():
            r.netns.close()
        for spare in spares:
            self._queue(spare.host, spare.generation)
        try:
            self.delete_retired()
        except CniError as exc:
            log.warning("pod pool: pairs left for the next start: %s", exc)
        if self._nsfd >= 0:
            os.close(self._nsfd)
            self._nsfd = -1

    def wake(self) -> None:
        self._loop.wake()

    # ---- spares ------------------------------------------------------------------------------

    @contextmanager
    def request(self) -> Iterator[None]:
        """Marks a CNI request (ADD, DEL) at work: the loop starts no VPP work meanwhile."""
        with self._lock:
            self._requests += 1
        try:
            yield
        finally:
            with self._lock:
                self._requests -= 1
                self._last_request = time.monotonic()
                self._lock.notify_all()

    def take(self, generation: int, wait: float = 5.0) -> Spare | None:
        """A spare made on VPP connection `generation` (stale ones go to the deletes): a
        ready one, else the one being made now (waited for, up to `wait` seconds), else
        None. The loop is woken to make another."""
        spare = None
        waited = False
        deadline = time.monotonic() + wait
        with self._lock:
            while spare is None:
                if self._spares:
                    candidate = self._spares.pop(0)
                    self._lock.notify_all()  # a loop waiting to delete makes a spare first
                    if candidate.generation == generation:
                        spare = candidate
                    else:
                        self._retire_locked(candidate.host, candidate.generation)
                    continue
                left = deadline - time.monotonic()
                if not self._making or left <= 0:
                    break
                waited = True
                self._lock.wait(left)
            self._takes["empty" if spare is None else "waited" if waited else "ready"] += 1
        self._loop.wake()
        return spare

    def ready(self) -> int:
        with self._lock:
            return len(self._spares)

    def take_counts(self) -> dict[str, int]:
        """ADDs so far by what `take` gave them (TAKES): an operator sees `empty` grow when
        pods come faster than VPP makes spares (VppPodPool too small for the node's bursts)."""
        with self._lock:
            return dict(self._takes)

    def hosts(self) -> list[str]:
        """The host ends of the spares ready now, oldest (the next taken) first."""
        with self._lock:
            return [s.host for s in self._spares]

    def peer_name(self, host: str) -> str | None:
        """The waiting end's name of host end `host`; None for a name not from the pool's
        set (an older agent's `vsw<digest>` end)."""
        number = host[len(self.links.prefix):]
        if not host.startswith(self.links.prefix) or not number.isdigit():
            return None
        return f"{self.cfg.spare_prefix}{number}"

    def refill(self) -> None:
        """Drops spares of an older VPP connection, then makes spares up to the pool size."""
        generation = self.api.generation
        with self._lock:
            stale = [s for s in self._spares if s.generation != generation]
            self._spares = [s for s in self._spares if s.generation == generation]
            for spare in stale:
                self._retire_locked(spare.host, spare.generation)
        if stale:
            self.delete_retired()
        while self.ready() < self.cfg.size and not self._loop.stopping.is_set():
            self._yield()
            with self._lock:
                self._making = True
            made: Spare | None = None
            try:
                made = self._make()
            finally:
                with self._lock:
                    self._making = False
                    if made is not None:
                        self._spares.append(made)
                    self._lock.notify_all()

    def _yield(self, quiet: float = 0.0, longest: float = YIELD_MAX,
               to_spares: bool = False) -> bool:
        """Waits for a moment without CNI requests at work, and `quiet` seconds since the
        last one ended; at most `longest` seconds. `to_spares`: gives up (False) as soon as
        a spare is wanted (an ADD took one: making it comes first)."""
        deadline = time.monotonic() + longest
        with self._lock:
            while not self._loop.stopping.is_set():
                if to_spares and len(self._spares) < self.cfg.size:
                    return False
                now = time.monotonic()
                calm = self._last_request + quiet - now
                if not self._requests and calm <= 0:
                    return True
                left = deadline - now
                if left <= 0:
                    return True
                self._lock.wait(min(left, calm) if not self._requests and calm > 0 else left)
        return True

    def _make(self) -> Spare:
        gateway = self._gateway()  # connects, and applies the base config after a VPP restart
        host = self.links.reserve(names.SPARE_TAG)
        peer = self.peer_name(host)
        assert peer is not None  # reserve() hands out the pool's names only
        return new_spare(self.api, self.links, self.cfg, host, peer, gateway, self._queue)

    # ---- retired pairs -----------------------------------------------------------------------

    def retire(self, host: str, generation: int, pod_netns: str = "",
               reuse: Reuse | None = None) -> None:
        """Hands over pair `host` (VPP's interface routeless, the waiting end down): with
        `reuse`, to serve again as a spare when the pool wants one (`recycle`), else for
        deletion: VPP's AF_PACKET interface when VPP had one on connection `generation`,
        then the veth, and with it the pod's macvlan in `pod_netns` if that is still there."""
        with self._lock:
            self._retire_locked(host, generation)
            if pod_netns:
                self._pod_netns[host] = pod_netns
            if reuse is not None:
                self._reuse[host] = reuse
        self._loop.wake()

    def recycle(self, pod_netns: str = "") -> None:
        """Retired pairs that may serve again (of `pod_netns`, or all) become spares while the
        pool wants some; the others lose that chance and wait for the deletes."""
        generation = self.api.generation
        while True:
            with self._lock:
                host = next((h for h in self._reuse if h in self._retired and
                             (not pod_netns or self._pod_netns.get(h) == pod_netns)), None)
                if host is None:
                    return
                reuse = self._reuse.pop(host)
                if self._retired[host] != generation or len(self._spares) >= self.cfg.size:
                    reuse.netns.close()
                    continue
                del self._retired[host]
                self._busy.add(host)
            peer = self.peer_name(host)
            assert peer is not None  # only pool-named pairs are offered for reuse
            spare = spare_again(self.api, self.links, host, peer, reuse, generation)
            with self._lock:
                self._busy.discard(host)
                if spare is None:
                    self._retired[host] = generation  # for the deletes
                else:
                    self._pod_netns.pop(host, None)
                    self._spares.append(spare)
                self._lock.notify_all()

    def settle(self, pod_netns: str) -> None:
        """Deletes now the retired pairs whose pod interface may still be in `pod_netns` (an
        ADD into that namespace wants its interface name back), or waits for the loop's;
        those that may serve again become spares instead."""
        self.recycle(pod_netns)
        while True:
            with self._lock:
                mine = [h for h, ns in self._pod_netns.items() if ns == pod_netns]
                todo = [h for h in mine if h in self._retired]
                if not todo:
                    if not any(h in self._busy for h in mine):
                        return
                    self._lock.wait()
                    continue
                host = todo[0]
                generation = self._retired.pop(host)
                self._busy.add(host)
            self._delete_one(host, generation)

    def _queue(self, host: str, generation: int) -> None:
        with self._lock:
            self._retire_locked(host, generation)

    def _retire_locked(self, host: str, generation: int) -> None:
        self._retired[host] = generation
        self.links.assign(host, names.RETIRED_TAG)

    def retiring(self) -> set[str]:
        """Host ends retired and not deleted yet."""
        with self._lock:
            return set(self._retired) | set(self._busy)

    def delete_retired(self, polite: bool = False) -> bool:
        """Deletes every retired pair, in VPP's order; one VPP will not let go of stays
        pending (the error is raised: the loop backs off and tries again). `polite`: each
        delete waits for a pause in the CNI requests first, and the deletes stop (False)
        when a spare is wanted (the loop). True: none is left."""
        while True:
            if polite and len(self.retiring()) <= PENDING_MAX and \
                    not self._yield(QUIET, DELETE_WAIT_MAX, to_spares=True):
                return False
            with self._lock:  # a pair that may serve again waits for `recycle`
                host = next((h for h in self._retired if h not in self._reuse), None)
                if host is None:
                    return True
                generation = self._retired.pop(host)
                self._busy.add(host)
            self._delete_one(host, generation)

    def _delete_one(self, host: str, generation: int) -> None:
        """Deletes retired pair `host`, taken from the pending into `_busy` by the caller;
        back to the pending when VPP will not let go of it."""
        try:
            self._delete(host, generation)
        except BaseException:
            with self._lock:
                self._retired.setdefault(host, generation)
            raise
        else:
            with self._lock:
                self._pod_netns.pop(host, None)
        finally:
            with self._lock:
                self._busy.discard(host)
                self._lock.notify_all()

    def _delete(self, host: str, generation: int) -> None:
        bound = True
        if generation != self.api.generation:
            # VPP restarted since (or unknown): ask; a delete of a name VPP has no binding
            # for makes it log a warning.
            self._gateway()
            bound = interfaces.by_name(self.api, afpacket.vpp_name(host)) is not None
        if bound:
            afpacket.delete(self.api, host)
            failpoints.hit("del:vpp-afpacket")
        self.links.delete(host)

    # ---- the loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        if not self._entered:
            enter_netns(self._nsfd)  # this thread only, once: the node's namespace
            self._entered = True
        while not self._loop.stopping.is_set():
            self.recycle()
            self.refill()
            if self.delete_retired(polite=True):
                return

    @property
    def error(self) -> str:
        return self._loop.error

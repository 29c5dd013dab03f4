"""The pod lifecycle: the ADD, DEL, CHECK and GC steps, serialized per attachment.

ADD is a sequence of steps (agent/lifecycle/add_steps), each pushing its inverse on an undo stack;
when a step fails the stack unwinds, so a failed ADD leaves no interface, route, address or record:

    1. allocate     addresses (ipam's NodeAllocator)   (undo: return them)
    2. record       record + allocation keys in etcd   (undo: delete both, one transaction;
                    etcd not answering: journaled like a DEL, addresses kept until settled)
    3. wire         dataplane host side + pod interface (undo: the driver's own steps)
       policy       the pod's NetworkPolicy rules, with the API configured (undo: removed)
    4. podside      addresses, neighbor, routes in the pod netns (removed with the interface)
    5. commit       record marked ready with its wiring

A record in state "adding" therefore means an ADD that never answered success; reconcile
treats it as garbage. Requests for one (container ID, ifname) run one at a time; different pods
run in parallel (KeyedLocks, below).

The manager also keeps a copy of the node's records (agent/state/local_records: loaded at
reconcile, updated by every ADD and DEL, this agent being their only writer, mirrored on the
node's disk). etcd stays the truth for every decision; the copy finds a pod's older sandbox
without listing etcd on every ADD, lets a DEL tear a pod down while etcd is unreachable
(agent/state/journal keeps the release until etcd is back), and gives etcd back the records it
lost (restore_records). DEL's steps are agent/lifecycle/del_steps'; CHECK, inspection and repair
agent/lifecycle/checks'; the steps and the checks get the manager's parts
(agent/lifecycle/parts), never the manager itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from agent.dataplane import Dataplane
from agent.infra.loops import SupervisedLoop
from agent.infra.metrics import Metrics
from agent.lifecycle import del_steps
from agent.lifecycle.add_steps import add_steps, netns_matches
from agent.lifecycle.checks import CheckFailed as CheckFailed
from agent.lifecycle.checks import Checks
from agent.lifecycle.parts import Parts, PodSide, PodStore, PolicyHook
from agent.linux import pod_netns
from agent.linux.netns import PodNetns
from agent.model.errors import CniError, TryAgainLater
from agent.model.pod import CniRequest, PodKey, PodRecord
from agent.state.journal import DeleteJournal
from agent.state.local_records import KnownRecords
from ipam import NodeAllocator

log = logging.getLogger(__name__)
T = TypeVar("T")
_STALE_ROUNDS = 20  # each lost round means another request replaced one of the pod's sandboxes


class KeyedLocks:
    """Per-attachment serialization: requests for one attachment run one at a time, others in
    parallel, as the kubelet serializes operations per pod and runs different pods in parallel;
    no node-wide lock exists anywhere. A lock per key, reference counted: created on demand and
    dropped when no request holds or waits for it, so the table never grows with pod churn."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[Hashable, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, *keys: Hashable) -> Iterator[None]:
        """Holds the locks of all `keys`, taken in a fixed order so two holders cannot deadlock."""
        ordered = sorted(set(keys), key=repr)
        taken: list[Hashable] = []
        try:
            for key in ordered:
                self._acquire(key)
                taken.append(key)
            yield
        finally:
            for key in reversed(taken):
                self._release(key)

    def _acquire(self, key: Hashable) -> None:
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        lock.acquire()

    def _release(self, key: Hashable) -> None:
        with self._guard:
            lock, users = self._locks[key]
            lock.release()
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)


class Part(Generic[T]):
    """An attribute of the manager that is one of its parts, read and written through `parts`
    (one place holds each part: a test may swap the store of a live manager)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: type | None = None) -> T:
        value: T = getattr(obj.parts, self.name)
        return value

    def __set__(self, obj: Any, value: T) -> None:
        setattr(obj.parts, self.name, value)


@dataclass(frozen=True)
class GCReport:
    removed: list[str]
    errors: list[str]


class PodManager:
    """Runs CNI verbs against the store, the dataplane and the pod side."""

    node_id: Part[int] = Part()
    store: Part[PodStore] = Part()
    dataplane: Part[Dataplane] = Part()
    pools: Part[NodeAllocator] = Part()
    mtu: Part[int] = Part()
    metrics: Part[Metrics] = Part()
    pod_side: Part[PodSide] = Part()
    journal: Part[DeleteJournal | None] = Part()
    known: Part[KnownRecords] = Part()
    locks: Part[KeyedLocks] = Part()

    def __init__(
        self,
        node_id: int,
        store: PodStore,
        dataplane: Dataplane,
        pools: NodeAllocator,
        mtu: int,
        metrics: Metrics | None = None,
        pod_side: PodSide = pod_netns,
        journal: DeleteJournal | None = None,
        records_dir: str | Path | None = None,
        policy: PolicyHook | None = None,
    ) -> None:
        self.parts = Parts(node_id, store, dataplane, pools, mtu, metrics or Metrics(), pod_side,
                           journal, KnownRecords(records_dir), KeyedLocks(), policy)
        self.checks = Checks(self.parts)
        self._drainer: SupervisedLoop | None = None
        self._refusing = ""
        self._register_gauges()

    def _register_gauges(self) -> None:
        """The StateDir's gauges (docs/metrics.md), beside the agent's own (agent/app/agent)."""
        healths = ([self.known.health] if self.known.directory is not None else []) + (
            [self.journal.health] if self.journal is not None else [])
        if not healths:
            return
        self.metrics.labelled(
            "vswitch_cni_state_dir_writable",
            "0 while writes or removals in this part of the StateDir fail (read-only, full).",
            ("part",), lambda: [((h.part,), 0.0 if h.problem else 1.0) for h in healths])
        self.metrics.gauge(
            "vswitch_cni_record_copies_behind",
            "Pod record copies in the StateDir not written or removed yet (the disk refused).",
            lambda: float(len(self.known.behind())))

    # ---- ADD -------------------------------------------------------------------------------

    def refuse_adds(self, reason: str) -> None:
        """ADDs fail with `reason` until called with "" (agent/state/id_guard: the node ID is
        lost)."""
        self._refusing = reason

    def add(self, req: CniRequest) -> PodRecord:
        # The pod's namespace is opened and checked once per ADD, here, before any lock or
        # address is taken (a FIFO here once held both for ever); every step uses this fd.
        with PodNetns.open(req.netns) as netns:
            return self._add(req, netns)

    def _add(self, req: CniRequest, netns: PodNetns) -> PodRecord:
        if self._refusing:
            raise TryAgainLater("this node cannot take pods now", self._refusing)
        # Replacing a stale sandbox takes its lock too: both locks are taken together, in the
        # locks' one global order (two re-ADDs each holding its own lock and waiting for the
        # other's deadlocked), and the stale sandbox is looked up again once they are held.
        for _ in range(_STALE_ROUNDS):
            stale = self._stale_sandbox(req)
            keys = [req.key] if stale is None else [req.key, stale.key]
            with self.locks.hold(*keys):
                if _key_of(self._stale_sandbox(req)) != _key_of(stale):
                    continue  # another request replaced a sandbox meanwhile: look again
                return self._add_locked(req, stale, netns)
        raise TryAgainLater(
            f"the sandboxes of pod {req.pod_namespace}/{req.pod_name} keep changing",
            f"{_STALE_ROUNDS} concurrent replacements in a row",
        )

    def _add_locked(
        self, req: CniRequest, stale: PodRecord | None, netns: PodNetns
    ) -> PodRecord:
        if self.journal is not None and self.journal.has(req.key):
            # An older DEL of this key (maybe journaled by the plugin a moment ago) still
            # owes its teardown and release: settled now, or it would undo this ADD later.
            del_steps.drain_key(self.parts, req.key)
        existing = self.store.get_pod(self.node_id, req.key)
        if existing is not None:
            same = existing.netns == req.netns and netns_matches(existing, netns)
            if existing.state == "ready" and same:
                return existing  # a repeated ADD: answer what was recorded
            self.teardown(existing)
        if stale is not None:
            current = self.store.get_pod(self.node_id, stale.key)
            if current is None:
                self._forget(stale.key)  # gone from etcd already: nothing left to replace
            else:
                log.info("replacing stale sandbox %s of pod %s", stale.key, req.pod_name)
                self.teardown(current)
        record = add_steps(self.parts, req, netns)
        self.known.remember(record)
        return record

    def _stale_sandbox(self, req: CniRequest) -> PodRecord | None:
        """An older sandbox of the same pod (namespace/name, same ifname) left behind."""
        if not (req.pod_namespace and req.pod_name):
            return None
        records = self.known.all()
        for record in records:
            if (
                record.pod_namespace == req.pod_namespace
                and record.pod_name == req.pod_name
                and record.ifname == req.ifname
                and record.container_id != req.container_id
                and (not req.pod_uid or not record.pod_uid or record.pod_uid == req.pod_uid)
            ):
                return record
        return None

    # ---- the node's copy of its records (agent/state/local_records) ------------------------

    def load(self, records: Iterable[PodRecord]) -> None:
        """Replaces the copy (reconcile calls this with the surviving records)."""
        self.known.load(records)

    def restore_records(self) -> list[str]:
        return self.checks.restore_records()

    def _forget(self, key: PodKey) -> None:
        self.known.forget(key)

    # ---- DEL -------------------------------------------------------------------------------

    def delete(self, req: CniRequest) -> None:
        """Idempotent: succeeds when the netns, the interface or the record is already gone.

        With etcd unreachable the dataplane is still torn down and the release journaled
        (agent/state/journal): the pod is gone at once, etcd and the pools catch up later."""
        with self.locks.hold(req.key):
            if self.journal is not None and self.journal.has(req.key):
                # The attachment's DEL (or a failed ADD's undo) is journaled already: settling
                # it is this DEL. Doing the DEL besides would release the addresses twice.
                try:
                    del_steps.drain_key(self.parts, req.key)
                except TryAgainLater as exc:
                    entry = self.journal.get(req.key)
                    if entry is not None and not entry.detached:  # the plugin's: tear down now
                        del_steps.delete_offline(self.parts, req.key, req.netns, exc)
                return
            try:
                record = self.store.get_pod(self.node_id, req.key)
            except TryAgainLater as exc:
                if self.journal is None:
                    raise
                del_steps.delete_offline(self.parts, req.key, req.netns, exc)
                return
            if record is None:
                # Nothing recorded; still remove what a crashed ADD may have left (the drivers
                # find a pod's objects by names derived from its key, or by its tag).
                del_steps.detach(self.parts, req.key, req.netns, None)
                self._forget(req.key)
                return
            self.teardown(record, journal_if_unreachable=True)

    def teardown(self, record: PodRecord, journal_if_unreachable: bool = False) -> None:
        """Detaches, deletes and releases a recorded pod (the attachment's lock held)."""
        del_steps.teardown(self.parts, record, journal_if_unreachable)

    # ---- the DEL journal -------------------------------------------------------------------

    def drain_journal(self) -> int:
        """Settles journaled DELs with etcd; returns how many are still pending."""
        if self.journal is None:
            return 0
        self.journal.rescan()  # the plugin journals DELs it could not bring to the agent
        for entry in self.journal.pending():
            with self.locks.hold(entry.key):
                try:
                    del_steps.drain_key(self.parts, entry.key)
                except TryAgainLater:
                    break
                except CniError as exc:
                    log.error("journaled DEL of %s cannot be settled: %s", entry.key, exc)
        return len(self.journal)

    def start_drainer(self, interval: float = 1.0) -> None:
        """A supervised loop that settles journaled DELs while etcd comes back, and puts right
        what a misbehaving StateDir refused."""
        self._drainer = SupervisedLoop("del-journal", self._settle, interval,
                                       expected=(CniError,), log=log)
        self._drainer.start()

    def _settle(self) -> None:
        self.retry_state_dir()
        if self.journal is not None:
            self.drain_journal()

    def retry_state_dir(self) -> None:
        """Puts right the record copies and removes the settled journal entries a read-only or
        full StateDir refused (each under its key's lock: a request of that key may change it)."""
        for key in self.known.behind():
            with self.locks.hold(key):
                self.known.retry(key)
        if self.journal is not None:
            for key in self.journal.unremoved():
                with self.locks.hold(key):
                    self.journal.retry_remove(key)

    def state_dir_problems(self) -> list[str]:
        """What is wrong with the StateDir now, one line per part ([] when all is well)."""
        healths = [self.known.health] + ([self.journal.health] if self.journal else [])
        return [f"StateDir {h.directory}: {h.problem}" for h in healths if h.problem]

    def stop(self) -> None:
        if self._drainer is not None:
            self._drainer.stop(timeout=5)

    # ---- CHECK, inspection, repair: agent/lifecycle/checks ----------------------------------

    def check(self, req: CniRequest) -> PodRecord:
        return self.checks.check(req)

    def inspect(self, key: PodKey) -> dict[str, Any] | None:
        return self.checks.inspect(key)

    def live_problems(self, record: PodRecord) -> list[str]:
        return self.checks.live_problems(record)

    def live_problems_many(self, records: Sequence[PodRecord]) -> list[list[str] | CniError]:
        return self.checks.live_problems_many(records)

    def repair(self, key: PodKey) -> list[str]:
        return self.checks.repair(key)

    def repair_all(self) -> dict[str, list[str]]:
        return self.checks.repair_all()

    # ---- GC --------------------------------------------------------------------------------

    def gc(self, valid: Iterable[PodKey]) -> GCReport:
        """Tears down every attachment of this node not in the runtime's valid list."""
        keep = set(valid)
        removed: list[str] = []
        errors: list[str] = []
        for record in self.store.list_pods(self.node_id):
            if record.key in keep or (self.journal is not None and record.key in self.journal):
                continue
            try:
                with self.locks.hold(record.key):
                    current = self.store.get_pod(self.node_id, record.key)
                    if current is not None:
                        self.teardown(current)
                removed.append(str(record.key))
            except CniError as exc:
                errors.append(f"{record.key}: {exc}")
        return GCReport(removed, errors)

    def records(self) -> list[PodRecord]:
        return self.store.list_pods(self.node_id)


def _key_of(record: PodRecord | None) -> PodKey | None:
    return None if record is None else record.key

"""Reconcile before serving: make the dataplane, the pools and etcd agree with the pod records.

Rules, in order of how costly a mistake is:
- An address is released only when its attachment is certainly dead: its record never reached
  "ready" (the runtime never got a success), or its network namespace no longer exists. Wrongly
  keeping an address is recoverable (GC, DEL); wrongly releasing one gives two pods one address.
- A dataplane object carrying our owner tag that no live record explains is removed. Objects
  are matched by the driver's own tag for each record's key, never by parsing a tag back.
- A live pod whose wiring is incomplete is repaired (agent/lifecycle/pods.repair: in place where the
  driver can, else wired again with its recorded addresses); what cannot be is reported damaged.
- DELs journaled while etcd was unreachable are settled first; one still pending (etcd went
  away again) keeps its addresses reserved and counts neither as live nor as dead.
- A live pod is never unwired because etcd lost its record (wiped, restored from an old
  backup): the node's own copy (agent/state/local_records) of a ready record etcd lacks is written
  back when its namespace is still the one ADD wired and its addresses are in this node's subnets.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from agent.lifecycle.add_steps import netns_matches
from agent.lifecycle.pods import PodManager
from agent.model.errors import CniError
from agent.model.pod import PodRecord

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    started: float = 0.0
    seconds: float = 0.0
    records: int = 0
    live: int = 0
    removed_unfinished: list[str] = field(default_factory=list)
    removed_dead: list[str] = field(default_factory=list)
    removed_orphans: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    pending_deletes: int = 0
    repaired: list[str] = field(default_factory=list)
    damaged: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "started": self.started,
            "seconds": round(self.seconds, 4),
            "records": self.records,
            "live": self.live,
            "removedUnfinished": self.removed_unfinished,
            "removedDead": self.removed_dead,
            "removedOrphans": self.removed_orphans,
            "restored": self.restored,
            "pendingDeletes": self.pending_deletes,
            "repaired": self.repaired,
            "damaged": self.damaged,
            "errors": self.errors,
        }


def _written_back(
    pods: PodManager, records: list[PodRecord], report: ReconcileReport
) -> list[PodRecord]:
    """The node's copies of live pods' records that etcd lacks, written back to etcd."""
    present = {r.key for r in records}
    back: list[PodRecord] = []
    for record in pods.known.on_disk():
        if (
            record.key in present
            or (pods.journal is not None and record.key in pods.journal)
            or record.state != "ready"
            or not (os.path.exists(record.netns) and netns_matches(record))
            or not all(pods.pools.owns(a) for a in record.addresses)
        ):
            continue  # a dead one's objects go as orphans below
        try:
            pods.store.put_pod(pods.node_id, record)
        except CniError as exc:
            report.errors.append(f"record of {record.key} not written back: {exc}")
            continue
        log.warning("etcd had lost the record of live pod %s: written back", record.key)
        report.restored.append(str(record.key))
        back.append(record)
    return back


def reconcile(pods: PodManager) -> ReconcileReport:
    """Runs once at start, before the CNI socket is opened."""
    report = ReconcileReport(started=time.time())
    start = time.perf_counter()
    # First: a DEL settled with etcd here is gone from the records listed next.
    report.pending_deletes = pods.drain_journal()
    records = pods.records()
    records += _written_back(pods, records, report)
    report.records = len(records)
    foreign = pods.pools.reserve(a for r in records for a in r.addresses)
    if foreign:
        report.errors.append(f"records hold addresses outside this node's subnets: {foreign}")
    live_tags: set[str] = set()
    survivors = []
    for record in records:
        name = str(record.key)
        if pods.journal is not None and record.key in pods.journal:
            continue  # its DEL happened; etcd still owes the release: addresses stay reserved
        try:
            if record.state != "ready":
                pods.teardown(record)
                report.removed_unfinished.append(name)
            elif not (os.path.exists(record.netns) and netns_matches(record)):
                pods.teardown(record)
                report.removed_dead.append(name)
            else:
                report.live += 1
                survivors.append(record)
                live_tags.add(pods.dataplane.tag(record.key))
        except CniError as exc:
            report.errors.append(f"{name}: {exc}")
    broken = []
    for record, problems in zip(survivors, pods.live_problems_many(survivors), strict=True):
        if isinstance(problems, CniError):
            report.errors.append(f"{record.key}: {problems}")
        elif problems:
            broken.append(record)
    try:
        owned = pods.dataplane.owned()
    except CniError as exc:
        report.errors.append(f"cannot list the dataplane's objects: {exc}")
        owned = {}
    pods.load(survivors)
    for obj, tag in owned.items():
        if tag in live_tags:
            continue
        try:
            pods.dataplane.remove_orphan(obj)
            report.removed_orphans.append(f"{obj} ({tag})")
        except CniError as exc:
            report.errors.append(f"orphan {obj}: {exc}")
    # Last: orphans are gone, so a re-wired pod cannot collide with its own leftovers.
    for record in broken:
        name = str(record.key)
        try:
            problems = pods.repair(record.key)
        except CniError as exc:
            problems = [f"repair failed: {exc}"]
        if problems:
            report.damaged[name] = problems
        else:
            report.repaired.append(name)
    report.seconds = time.perf_counter() - start
    log.info(
        "reconcile: %d records (%d written back), %d live, %d unfinished and %d dead removed, "
        "%d orphans removed, %d repaired, %d damaged, %d errors in %.3fs",
        report.records,
        len(report.restored),
        report.live,
        len(report.removed_unfinished),
        len(report.removed_dead),
        len(report.removed_orphans),
        len(report.repaired),
        len(report.damaged),
        len(report.errors),
        report.seconds,
    )
    return report

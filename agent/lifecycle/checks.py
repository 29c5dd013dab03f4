"""What a live attachment lacks, and putting it right: CHECK, an operator's inspection, the
batched check of reconcile, repair (reconcile, and after the vswitch restarted), and writing
back the records etcd lost.

Every entry takes the attachment's lock (agent/lifecycle/pods.KeyedLocks) and reads etcd for
the record: it never judges half an ADD or DEL. Nothing here answers a CNI verb by itself;
PodManager (agent/lifecycle/pods) delegates.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from agent.dataplane.undo import UndoStack
from agent.lifecycle.add_steps import netns_matches
from agent.lifecycle.parts import Parts
from agent.model.errors import CniError, TryAgainLater, UnknownContainer
from agent.model.pod import CniRequest, PodKey, PodRecord, Wiring

log = logging.getLogger(__name__)


class CheckFailed(CniError):
    """CHECK found the attachment different from what ADD created."""

    code = 103


class Checks:
    """CHECK, inspection and repair over the lifecycle's parts."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts

    def live_problems(self, record: PodRecord) -> list[str]:
        """What the dataplane and the pod netns lack compared with a ready record."""
        wiring = Wiring(**record.wiring)
        pod = record.network()
        return self.parts.dataplane.check(pod, wiring) + self.parts.pod_side.check(
            pod, wiring.gateway_mac, wiring.pod_mac
        )

    def live_problems_many(self, records: Sequence[PodRecord]) -> list[list[str] | CniError]:
        """`live_problems` of each record, in order, the error in place of a pod whose check
        failed; the dataplane reads its tables once for all (reconcile: linear in the pods)."""
        items = [(r.network(), Wiring(**r.wiring)) for r in records]
        try:
            host: list[list[str] | None] = list(self.parts.dataplane.check_many(items))
        except CniError:  # one pod's failure must not hide the others: each on its own
            host = [None] * len(items)
        out: list[list[str] | CniError] = []
        side = self.parts.pod_side
        for (pod, wiring), problems in zip(items, host, strict=True):
            try:
                if problems is None:
                    problems = self.parts.dataplane.check(pod, wiring)
                out.append(problems + side.check(pod, wiring.gateway_mac, wiring.pod_mac))
            except CniError as exc:
                out.append(exc)
        return out

    # ---- repair (reconcile, and after the vswitch restarted) ----------------------------

    def repair(self, key: PodKey) -> list[str]:
        """Re-creates what a live, ready attachment is missing; returns what is still wrong.

        The driver first tries in place (after a VPP restart a veth survives; only VPP's side
        is made again, the pod keeps its interface); otherwise the pod is wired from scratch
        with its recorded addresses and MACs, pod side included. The record gets the new wiring.
        """
        with self.parts.locks.hold(key):
            current = self.parts.store.get_pod(self.parts.node_id, key)
            if current is None or current.state != "ready":
                return []
            if self.parts.journal is not None and self.parts.journal.has(key):
                return []
            if not self.live_problems(current):
                return []
            if not (os.path.exists(current.netns) and netns_matches(current)):
                return [f"netns {current.netns} is gone"]
            pod = current.network()
            old = Wiring(**current.wiring)
            wiring = self.parts.dataplane.restore(pod, old)
            how = "in place"
            if wiring is None:
                how = "from scratch"
                self.parts.dataplane.detach(pod, old)
                undo = UndoStack()
                try:
                    wired = self.parts.dataplane.attach(pod, undo)
                    pod_mac = self.parts.pod_side.configure(pod, wired.gateway_mac)
                except BaseException:
                    undo.unwind()
                    raise
                wiring = Wiring(wired.host_ifname, pod_mac, wired.gateway_mac, wired.extra)
            updated = copy.deepcopy(current)
            updated.wiring = asdict(wiring)
            self.parts.store.update_pod(self.parts.node_id, updated, current)
            self.parts.known.remember(updated)
            log.info("repaired %s (%s)", key, how)
            return self.live_problems(updated)

    def repair_all(self) -> dict[str, list[str]]:
        """Repairs every known attachment; returns those still damaged, with their problems."""
        keys = [r.key for r in self.parts.known.all()]
        damaged: dict[str, list[str]] = {}
        for key in keys:
            try:
                problems = self.repair(key)
            except CniError as exc:
                problems = [f"repair failed: {exc}"]
            if problems:
                damaged[str(key)] = problems
        return damaged

    # ---- records etcd lost --------------------------------------------------------------

    def restore_records(self) -> list[str]:
        """Writes back the records etcd lost (wiped, restored from an old backup) from the
        in-memory copy, with their allocation keys; returns the keys written. A pod is never
        removed because etcd forgot it."""
        present = {r.key for r in self.parts.store.list_pods(self.parts.node_id)}
        missing = [r.key for r in self.parts.known.all() if r.key not in present]
        restored: list[str] = []
        for key in missing:
            with self.parts.locks.hold(key):
                record, journal = self.parts.known.get(key), self.parts.journal
                if record is None or (journal is not None and journal.has(key)):
                    continue  # deleted meanwhile
                try:
                    if self.parts.store.get_pod(self.parts.node_id, key) is None:
                        self.parts.store.put_pod(self.parts.node_id, record)
                        restored.append(str(key))
                except TryAgainLater:
                    raise  # the caller tries again (what was written stays written)
                except CniError as exc:
                    log.error("record of %s not written back: %s", key, exc)
        return restored

    # ---- CHECK ---------------------------------------------------------------------------

    def check(self, req: CniRequest) -> PodRecord:
        with self.parts.locks.hold(req.key):
            record = self.parts.store.get_pod(self.parts.node_id, req.key)
            if (
                record is None
                or record.state != "ready"
                or (self.parts.journal is not None and self.parts.journal.has(req.key))
            ):
                raise UnknownContainer(f"no attachment {req.key} on this node")
            problems = self._problems(record, req)
            if problems:
                raise CheckFailed(f"attachment {req.key} differs from its ADD", "; ".join(problems))
            return record

    def inspect(self, key: PodKey) -> dict[str, Any] | None:
        """The record of `key` and what its live state lacks (an operator's CHECK: the netns,
        the dataplane and the pod side compared with the record; nothing changed), or None."""
        with self.parts.locks.hold(key):
            record = self.parts.store.get_pod(self.parts.node_id, key)
            if record is None:
                return None
            problems: list[str] = []
            if self.parts.journal is not None and key in self.parts.journal:
                problems.append("a DEL of it is pending (journaled)")
            elif record.state != "ready":
                problems.append(f"state is {record.state!r}: its ADD did not finish")
            elif not (os.path.exists(record.netns) and netns_matches(record)):
                problems.append(f"netns {record.netns} is gone")
            else:
                problems += self.live_problems(record)
            return {"containerId": key.container_id, "ifname": key.ifname,
                    "ok": not problems, "problems": problems, "record": record.to_json_dict()}

    def _problems(self, record: PodRecord, req: CniRequest) -> list[str]:
        problems: list[str] = []
        if record.netns != req.netns:
            problems.append(f"netns is {req.netns!r}, ADD wired {record.netns!r}")
        elif not netns_matches(record):
            # The pod's namespace is gone: its links are going with it (the kernel removes a
            # dead namespace's veths asynchronously), so there is no live state to compare.
            problems.append(f"{record.netns} is now another network namespace than ADD wired")
            return problems + _prev_result_problems(req.config.get("prevResult"), record)
        problems += _prev_result_problems(req.config.get("prevResult"), record)
        return problems + self.live_problems(record)


def _prev_result_problems(prev: object, record: PodRecord) -> list[str]:
    """CHECK's prevResult must list the addresses ADD gave this attachment."""
    if not isinstance(prev, dict):
        return []
    ips = prev.get("ips", [])
    listed = (
        {ip.get("address") for ip in ips if isinstance(ip, dict)}
        if isinstance(ips, list)
        else set()
    )
    return [f"prevResult lacks address {a}" for a in record.addresses if a not in listed]

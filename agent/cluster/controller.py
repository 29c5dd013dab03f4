"""The mesh controller: keeps this node's dataplane connected to every node in the registry.

Lifecycle of one remote node's mesh entry (the node ID is the key):

    registry put, new         program(remote)                      -> programmed | failed
    registry put, changed     program(new), then unprogram(old) of
                              what the new entry no longer needs    -> programmed | failed
    registry delete           unprogram(remote)                    -> gone
    failed                    program(remote) again every `retry` seconds
    every relist              prune: whatever the dataplane holds that no current remote node
                              explains is removed (a node removed while this agent was down,
                              leftovers of an earlier run), what it lost is programmed again;
                              `resync_now()` (the dataplane reconnected) asks for one at once

The loop: publish this node, list the registry (with its revision), diff, then follow a watch
from that revision + 1. When the watch ends (etcd restarted, a compaction, a broken stream) or
every `resync` seconds, it lists and diffs again; etcd errors back off up to 5 s. The dataplane
keeps everything while etcd is away: an outage changes nothing on the wire.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from agent.model.node import NodeInfo
from agent.state.registry import NodeEvent, Registry, WatchItem

log = logging.getLogger(__name__)


class MeshDataplane(Protocol):
    """The dataplane side of the mesh (agent/dataplane/kernel_mesh.py)."""

    def check_mtu(self, local: NodeInfo) -> None:
        """Raises InvalidConfig when the pod MTU does not fit the uplink."""

    def program(self, local: NodeInfo, remote: NodeInfo) -> None:
        """Makes `remote` reachable; idempotent (replace semantics). Raises on failure."""

    def unprogram(
        self, local: NodeInfo, remote: NodeInfo, keep: list[NodeInfo]
    ) -> list[str]:
        """Removes what `remote` needed and no node in `keep` needs; returns what it removed."""
        ...

    def prune(self, local: NodeInfo, keep: list[NodeInfo]) -> list[str]:
        """Removes every mesh object no node in `keep` explains; returns what it removed."""
        ...


@dataclass
class RemoteState:
    info: NodeInfo
    state: str = "pending"  # programmed | failed | pending
    reason: str = ""
    since: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "reason": self.reason, "since": self.since}


class MeshController:
    """Registry watch -> dataplane calls, in one daemon thread."""

    def __init__(
        self,
        registry: Registry,
        local: NodeInfo,
        dataplane: MeshDataplane,
        resync: float = 30.0,
        retry: float = 2.0,
    ) -> None:
        self.registry = registry
        self.local = local
        self.dataplane = dataplane
        self.resync = resync
        self.retry = retry
        self._lock = threading.Lock()  # guards the dicts below against snapshot()
        self._seen: dict[int, NodeInfo] = {}
        self._remotes: dict[int, RemoteState] = {}
        self._revision = 0
        self._etcd_error = ""
        self._stop = threading.Event()
        self._resync = threading.Event()  # relist and prune now (the dataplane restarted)
        self.removed = threading.Event()  # this node's own entry was removed (node remove)
        self._thread = threading.Thread(target=self._run, name="mesh", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def resync_now(self) -> None:
        """Asks for a relist and prune within `retry` seconds instead of at the next periodic
        one: the dataplane lost state (a restarted VPP has no tunnels), prune restores it."""
        self._resync.set()

    # ---- the loop ---------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = 0.2
        published = False
        while not self._stop.is_set():
            try:
                if not published:
                    self.registry.publish(self.local)
                    published = True
                nodes, revision = self.registry.entries()
                self._set_etcd_error("")
                self._sync(nodes, revision)
                backoff = 0.2
                self._follow(revision)
            except Exception as exc:  # etcd away or a bug: the mesh as programmed stays
                self._set_etcd_error(str(exc))
                log.warning("node registry: %s; retrying in %.1fs", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _follow(self, revision: int) -> None:
        """Applies watch events until the watch ends or a resync is due."""
        items: queue.Queue[WatchItem] = queue.Queue()
        watch_id = self.registry.watch(revision + 1, items.put)
        try:
            deadline = time.monotonic() + self.resync
            while not self._stop.is_set() and time.monotonic() < deadline:
                if self._resync.is_set():
                    self._resync.clear()
                    return
                try:
                    item = items.get(timeout=self.retry)
                except queue.Empty:
                    self._retry_failed()
                    continue
                if item is None or isinstance(item, BaseException):
                    log.warning("registry watch ended (%s): relisting", item or "stream closed")
                    return
                for event in item:
                    self._apply(event)
        finally:
            self.registry.cancel(watch_id)

    # ---- diffing ----------------------------------------------------------------------------

    def _sync(self, nodes: dict[int, NodeInfo], revision: int) -> None:
        with self._lock:
            before, went_back = self._revision, revision < self._revision
            self._seen = dict(nodes)
            self._revision = revision
        if went_back:
            # etcd lost data (wiped, restored from an old backup): entries missing now were
            # not removed by an operator. This node publishes itself again (agent/state/id_guard
            # re-binds its ID and pod records); the others do the same within their next
            # relist, and the one after this drops whoever did not come back.
            log.warning("node registry went back from revision %d to %d (etcd wiped or "
                        "restored?): publishing this node again", before, revision)
            self.registry.publish(self.local)
            nodes = {**{i: s.info for i, s in self._remotes.items()}, **nodes}
        elif self.local.node_id not in nodes:  # published before listing
            self._own_entry_gone()
        remotes = {i: n for i, n in nodes.items() if i != self.local.node_id}
        for node_id in [i for i in self._remotes if i not in remotes]:
            self._remove(node_id)
        for info in remotes.values():
            state = self._remotes.get(info.node_id)
            if state is None or state.info != info or state.state != "programmed":
                self._program(info, state.info if state else None)
        removed = self.dataplane.prune(self.local, self._desired())
        if removed:
            log.info("mesh: removed %d stale objects: %s", len(removed), "; ".join(removed))

    def _apply(self, event: NodeEvent) -> None:
        with self._lock:
            self._revision = max(self._revision, event.revision)
            if event.info is None:
                self._seen.pop(event.node_id, None)
            else:
                self._seen[event.node_id] = event.info
        if event.node_id == self.local.node_id:
            if event.info is None:
                self._own_entry_gone()
            return
        if event.info is None:
            self._remove(event.node_id)
            return
        old = self._remotes.get(event.node_id)
        if old is None or old.info != event.info or old.state != "programmed":
            self._program(event.info, old.info if old else None)

    def _own_entry_gone(self) -> None:
        """This node's entry is gone: an operator's `node remove` (its removal mark is there),
        or else etcd lost it, e.g. wiped and written to by other agents since, so that its
        revision did not go back: then this node publishes itself again (agent/state/id_guard
        re-binds its ID the same way)."""
        if self.registry.removal_marked(self.local.name):
            self._removed_by_operator()
            return
        log.warning("this node's registry entry is gone without a removal mark (etcd lost "
                    "data?): publishing it again")
        self.registry.publish(self.local)

    def _removed_by_operator(self) -> None:
        """The operator removed this node (with --force, as it was live): its node ID may go
        to a new node, so the agent must stop taking pods (readiness says why); the mesh to
        the others stays for the pods still running here."""
        if not self.removed.is_set():
            log.error("this node (%s, ID %d) was removed from the cluster; restart the agent "
                      "to join again", self.local.name, self.local.node_id)
            self.removed.set()

    def _program(self, info: NodeInfo, old: NodeInfo | None) -> None:
        state = RemoteState(info, since=time.time())
        try:
            if info.node_ip == self.local.node_ip:
                raise ValueError(f"it has this node's IP {info.node_ip}")
            self.dataplane.program(self.local, info)
            state.state = "programmed"
            log.info("mesh: node %s (ID %d, %s) programmed", info.name, info.node_id, info.node_ip)
        except Exception as exc:  # recorded per node, retried; the others carry on
            state.state, state.reason = "failed", str(exc)
            log.warning("mesh: node %s (ID %d) failed: %s", info.name, info.node_id, exc)
        with self._lock:
            self._remotes[info.node_id] = state
        if old is not None and old != info:
            self.dataplane.unprogram(self.local, old, self._desired())

    def _remove(self, node_id: int) -> None:
        with self._lock:
            state = self._remotes.pop(node_id, None)
        if state is None:
            return
        removed = self.dataplane.unprogram(self.local, state.info, self._desired())
        log.info("mesh: node %s (ID %d) removed: %s", state.info.name, node_id,
                 "; ".join(removed) or "nothing held")

    def _retry_failed(self) -> None:
        for state in list(self._remotes.values()):
            if state.state == "failed":
                self._program(state.info, None)

    def _desired(self) -> list[NodeInfo]:
        with self._lock:
            return [s.info for s in self._remotes.values()]

    def _set_etcd_error(self, text: str) -> None:
        with self._lock:
            self._etcd_error = text

    # ---- the REST view ----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The registry as this agent sees it, with the programming state per remote node."""
        with self._lock:
            nodes = []
            for node_id, info in sorted(self._seen.items()):
                entry = info.to_json()
                remote = self._remotes.get(node_id)
                if node_id == self.local.node_id:
                    entry["mesh"] = {"state": "local", "reason": "", "since": 0.0}
                elif remote is not None:
                    entry["mesh"] = remote.to_json()
                nodes.append(entry)
            return {
                "local": self.local.to_json(),
                "revision": self._revision,
                "registryError": self._etcd_error,
                "nodes": nodes,
            }

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

The loop is a cached list + watch of the registry (agent/infra/listwatch) in a supervised thread:
each (re)list publishes this node the first time, then diffs the whole listing against what is
programmed (level-triggered: failed nodes, nodes kept over an etcd wipe and anything a failed
round missed are settled here); watch events in between change one node each; every `retry`
seconds failed nodes are programmed again. The list+watch relists when the watch ends (etcd
restarted, a compaction, a broken stream) and every `resync` seconds; etcd errors back off up to
5 s. The dataplane keeps everything while etcd is away: an outage changes nothing on the wire.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from agent.infra.listwatch import Change, Handler, ListWatch, Relist
from agent.infra.watchstream import Source
from agent.model.errors import CniError
from agent.model.node import NodeInfo

log = logging.getLogger(__name__)


class NodeRegistry(Source[int, NodeInfo, int], Protocol):
    """The node registry as the controller uses it (agent/state/registry.Registry): a list +
    watch source of the entries by node ID, where this node publishes its own."""

    def publish(self, info: NodeInfo) -> None: ...
    def removal_marked(self, node_name: str) -> bool: ...


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


class MeshController(Handler[int, NodeInfo, int]):
    """Registry list + watch -> dataplane calls, in one supervised thread."""

    def __init__(
        self,
        registry: NodeRegistry,
        local: NodeInfo,
        dataplane: MeshDataplane,
        resync: float = 30.0,
        retry: float = 2.0,
        refresh_local: Callable[[NodeInfo], NodeInfo | None] | None = None,
    ) -> None:
        self.registry = registry
        # asked at every tick whether this node's own entry changed (a rotated WireGuard key):
        # the new entry is published at once
        self.refresh_local = refresh_local
        self._republish = False
        self.local = local
        self.dataplane = dataplane
        self._lock = threading.Lock()  # guards _remotes against snapshot()
        self._remotes: dict[int, RemoteState] = {}
        self._published = False
        self.removed = threading.Event()  # this node's own entry was removed (node remove)
        # the registry as last seen: the cache the REST view reads
        self.nodes: ListWatch[int, NodeInfo, int] = ListWatch(
            "mesh", registry, [self], resync=resync, tick=retry, expected=(CniError,), log=log)

    def start(self) -> None:
        self.nodes.start()

    def stop(self) -> None:
        self.nodes.stop()

    def resync_now(self) -> None:
        """Asks for a relist and prune now instead of at the next periodic one: the dataplane
        lost state (a restarted VPP has no tunnels), prune restores it."""
        self.nodes.relist_now()

    # ---- the list+watch's handler -----------------------------------------------------------

    def on_relist(self, relist: Relist[int, NodeInfo, int]) -> None:
        """A (re)list: this node published, then every listed node settled (not only the
        diff: a failed node, or one kept over a wipe, needs it too), then the dataplane pruned."""
        nodes = dict(relist.items)
        went_back = relist.previous is not None and relist.revision < relist.previous
        if relist.changes and relist.previous is not None:
            gone = sum(1 for c in relist.changes if c.new is None)
            log.info("node registry relisted: %d nodes added or changed, %d removed while the "
                     "watch was away", len(relist.changes) - gone, gone)
        if went_back:
            # etcd lost data (wiped, restored from an old backup): entries missing now were
            # not removed by an operator. This node publishes itself again (agent/state/id_guard
            # re-binds its ID and pod records); the others do the same within their next
            # relist, and the one after this drops whoever did not come back.
            log.warning("node registry went back from revision %d to %d (etcd wiped or "
                        "restored?): publishing this node again", relist.previous, relist.revision)
            self.registry.publish(self.local)
            nodes = {**{i: s.info for i, s in self._remotes.items()}, **nodes}
        elif not self._published:  # the first list: this node joins (the watch brings it in)
            self.registry.publish(self.local)
        elif self.local.node_id not in nodes:
            self._own_entry_gone()
        self._published = True
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

    def on_change(self, change: Change[int, NodeInfo]) -> None:
        """One watch event: that node programmed, reprogrammed or removed."""
        if change.key == self.local.node_id:
            if change.new is None:
                self._own_entry_gone()
            return
        if change.new is None:
            self._remove(change.key)
            return
        old = self._remotes.get(change.key)
        if old is None or old.info != change.new or old.state != "programmed":
            self._program(change.new, old.info if old else None)

    def on_tick(self) -> None:
        self._refresh_local()
        self._retry_failed()

    def _refresh_local(self) -> None:
        """Publishes this node's entry again when it changed here (until etcd took it)."""
        if self.refresh_local is None or not self._published:
            return
        try:
            fresh = self.refresh_local(self.local)
            if fresh is not None:
                self.local, self._republish = fresh, True
            if self._republish:
                self.registry.publish(self.local)
                self._republish = False
                log.info("this node's registry entry published again (its key changed)")
        except Exception as exc:  # the next tick tries again
            log.warning("this node's changed entry is not published yet: %s", exc)

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

    # ---- the REST view ----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The registry as this agent sees it, with the programming state per remote node."""
        seen = self.nodes.items()
        with self._lock:
            nodes = []
            for node_id, info in sorted(seen.items()):
                entry = info.to_json()
                remote = self._remotes.get(node_id)
                if node_id == self.local.node_id:
                    entry["mesh"] = {"state": "local", "reason": "", "since": 0.0}
                elif remote is not None:
                    entry["mesh"] = remote.to_json()
                nodes.append(entry)
            return {
                "local": self.local.to_json(),
                "revision": self.nodes.revision or 0,
                "registryError": self.nodes.error,
                "nodes": nodes,
            }

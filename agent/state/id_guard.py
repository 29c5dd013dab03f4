"""The node's ID binding in etcd, kept true while the agent runs.

The node ID fixes the node's subnets, and the binding in etcd (`nodes/id/<id>` and
`nodes/name/<name>`) is what keeps every other node off them. etcd can lose it under a running
agent: wiped, or restored from a backup older than the claim. The guard checks the binding every
second; when etcd lost it (the binding is gone, and no removal mark says an operator removed the
node) and the ID is still free, it binds it again
at once (before another node's smallest-free claim can take it) and writes back the pod records
etcd lost from the agent's own copy (agent/state/local_records): live pods are never removed
because etcd
forgot them. When another node holds the ID now, its subnets are that node's: the agent stops
taking ADDs (a clear error, readiness false) instead of handing out that node's addresses,
leaves its live pods alone, and takes ADDs again once the binding is its own again. A binding
removed by an operator (`node remove`, `agent.state.node_ids release`: both leave the mark
`nodes/removed/<name>`) is never undone here: ADDs are refused until the agent is restarted (it
then joins again and the mark goes). etcd's revision cannot make that distinction: after a wipe,
the other agents' writes soon carry the new etcd past the revision this agent saw last.
"""

from __future__ import annotations

import logging
from typing import Protocol

from agent.infra.loops import SupervisedLoop
from agent.model.errors import CniError
from agent.state.id_bindings import Binding

log = logging.getLogger(__name__)


class BindingStore(Protocol):
    def bind_node_id(self, node_name: str, node_id: int) -> Binding: ...


class Records(Protocol):
    """What the guard needs of agent/lifecycle/pods.PodManager."""

    def refuse_adds(self, reason: str) -> None: ...
    def restore_records(self) -> list[str]: ...


class BindingGuard:
    """Checks (and re-asserts) one node's ID binding; `lost` says why ADDs are refused."""

    def __init__(self, store: BindingStore, node_name: str, node_id: int, pods: Records) -> None:
        self.store = store
        self.node_name = node_name
        self.node_id = node_id
        self.pods = pods
        self.lost = ""
        self._restore_pending = False  # bound again, the records not all written back yet
        self._loop: SupervisedLoop | None = None

    def check(self) -> None:
        """One look; an unreachable etcd is no news (readiness reports it already)."""
        try:
            found = self.store.bind_node_id(self.node_name, self.node_id)
        except CniError as exc:
            log.debug("node ID binding not checked: %s", exc)
            return
        holder, written = found.holder, found.rewritten
        if found.removed:
            if not self.lost:
                log.error("node ID %d of %s was deleted (node remove): refusing ADDs",
                          self.node_id, self.node_name)
            self.lost = (
                f"node {self.node_name} was removed from the cluster (its node ID {self.node_id} "
                "was deleted: node remove, or agent.nodes release): ADDs are refused, as the ID "
                "may go to a new node; restart the agent to join again"
            )
            self.pods.refuse_adds(self.lost)
            return
        if holder:
            if not self.lost:
                log.error("node ID %d of %s is held by node %s in etcd now (etcd wiped or "
                          "restored?): refusing ADDs", self.node_id, self.node_name, holder)
            self.lost = (
                f"node ID {self.node_id} of node {self.node_name} is held by node {holder} in "
                "etcd now (etcd wiped or restored from a backup?): ADDs are refused so that no "
                "address of that node's subnet is handed out twice; free one of the two nodes' "
                "IDs (python -m agent.nodes release)"
            )
            self.pods.refuse_adds(self.lost)
            return
        if written or self.lost:
            log.warning("etcd had lost node ID %d of %s: bound again", self.node_id,
                        self.node_name)
            self._restore_pending = True
        if self._restore_pending:
            try:
                restored = self.pods.restore_records()
            except CniError as exc:  # etcd went away again: the next check tries again
                log.warning("pod records not written back yet: %s", exc)
                return
            self._restore_pending = False
            log.warning("%d pod records written back to etcd: %s", len(restored), restored[:10])
        if self.lost:
            self.lost = ""
            self.pods.refuse_adds("")

    def start(self, interval: float = 1.0) -> None:
        """Checks every `interval` seconds in a supervised loop (it outlives any failure)."""
        self._loop = SupervisedLoop("node-binding", self.check, interval,
                                    expected=(CniError,), log=log)
        self._loop.start()

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.stop(timeout=5)

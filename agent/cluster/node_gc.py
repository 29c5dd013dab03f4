"""Nodes deleted from the Kubernetes API leave the cluster: their registry entry, node ID and
pod subnet are freed, and every agent's mesh controller then drops their tunnels.

The operator's `node remove` (agent/state/node_removal) does the removal; this runs it for
them, on every agent (the removal is one guarded etcd transaction: two agents racing remove it
once, the other is refused and says nothing). A registry entry is removed only when all of
these hold, each for a reason:

- the Kubernetes cache has listed Nodes (an empty cache is no proof of absence);
- no Node of its name has been in the API for `grace` seconds, measured by this agent from when
  it first saw the entry without a Node (a Node re-created meanwhile, a rename, a restart of
  this agent all start the count again: freeing an ID is not undone lightly);
- no Pod of the API is bound to it (its pods are rescheduled first; their records and
  addresses go with the removal);
- its agent is not alive (no liveness lease: `remove_node` refuses a live node), so a node whose
  agent still runs under a name the API does not know (a NodeName that differs from the Node's)
  is never removed from under it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection

from agent.state.node_removal import RemoveRefused, remove_node
from agent.state.registry import Registry

log = logging.getLogger(__name__)


class NodeCollector:
    """One look per `run_once` (run in a SupervisedLoop by the app)."""

    def __init__(
        self,
        registry: Registry,
        local_name: str,
        api_nodes: Callable[[], Collection[str]],
        api_pods_on: Callable[[str], int],
        synced: Callable[[], bool],
        *,
        grace: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.local_name = local_name
        self._api_nodes = api_nodes
        self._api_pods_on = api_pods_on
        self._synced = synced
        self.grace = grace
        self._clock = clock
        self._missing: dict[str, float] = {}  # registry name -> when first seen without a Node
        self._said: dict[str, str] = {}  # name -> the last reason logged (once each)
        self.removed: list[str] = []

    def run_once(self) -> list[str]:
        """Removes what qualifies now; returns the names removed."""
        if not self._synced():
            return []
        in_api = set(self._api_nodes())
        entries, _ = self.registry.entries()
        now = self._clock()
        names = {info.name for info in entries.values()}
        for name in list(self._missing):
            if name not in names or name in in_api:
                del self._missing[name]
                self._said.pop(name, None)
        removed = []
        for info in entries.values():
            name = info.name
            if name == self.local_name or name in in_api:
                continue
            since = self._missing.setdefault(name, now)
            if now - since < self.grace:
                self._say(name, f"node {name} (ID {info.node_id}) has no Node in the Kubernetes "
                                f"API: freed after {self.grace:.0f}s unless it comes back")
                continue
            pods = self._api_pods_on(name)
            if pods:
                self._say(name, f"node {name} has no Node in the Kubernetes API but {pods} pods "
                                "are still bound to it: waiting for them to go")
                continue
            try:
                node_id = remove_node(self.registry, name)
            except RemoveRefused as exc:
                self._say(name, f"node {name} has no Node in the Kubernetes API and is kept: "
                                f"{exc}")
                continue
            log.warning("node %s (ID %d) left the Kubernetes API %.0fs ago and has no pods: "
                        "removed from the cluster (its ID and subnet are free again)",
                        name, node_id, now - since)
            del self._missing[name]
            self._said.pop(name, None)
            removed.append(name)
        self.removed += removed
        return removed

    def _say(self, name: str, text: str) -> None:
        if self._said.get(name) != text:
            self._said[name] = text
            log.info("%s", text)

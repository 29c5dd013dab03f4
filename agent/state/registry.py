"""The node registry in etcd: every agent publishes its node here and watches everyone else's.

Keys under the agent's prefix (docs/etcd-keys.md):

    registry/<node ID>   NodeInfo as JSON; written by the node's agent at start, removed only by
                         the operator's `node remove` (an agent that stops leaves it: its pods
                         stay wired and reachable)
    alive/<node ID>      "1", attached to a lease the node's agent keeps alive (TTL `ALIVE_TTL`):
                         gone within the TTL after the agent died; `node remove` refuses a node
                         whose key is there unless forced

`Registry` holds a `Store` of its own (its own etcd connection): the watch stream lives beside
the request path's channel, so the store's failover (which drops the client's stubs) never cuts
the watch; etcd errors are translated by the store's client, as every other etcd call's.

The registry is a list+watch source (agent/infra/listwatch): `listing()` gives the valid entries
by node ID at a revision, `watch(after)` the puts and deletes after it; a compacted revision
ends the stream with WatchExpired, a broken connection with the client's error.
"""

from __future__ import annotations

import logging

from pyetcd import transactions as tx

from agent.infra.loops import SupervisedLoop
from agent.infra.watchstream import CallbackStream, Delete, Listing, Put, WatchExpired
from agent.model.errors import CniError
from agent.model.node import NodeInfo, NodeInfoError
from agent.state.etcd_client import Compacted, KeyEvent, WatchItem
from agent.state.etcd_keys import dump, load, prefix_end
from agent.state.id_bindings import removal_mark
from agent.state.store import Store

log = logging.getLogger(__name__)

ALIVE_TTL = 10  # seconds a dead agent's node still counts as live

NodeStream = CallbackStream[int, NodeInfo, int]


class Registry:
    """Publish, list, watch and remove registry entries; liveness leases. The registry owns
    the store it is given: `close()` closes it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._etcd = store.etcd
        self._keys = store.keys

    def close(self) -> None:
        self.store.close()

    # ---- entries ----------------------------------------------------------------------------

    def publish(self, info: NodeInfo) -> None:
        self._etcd.put(self._keys.entry(info.node_id), dump(info.to_json()))

    def entries(self) -> tuple[dict[int, NodeInfo], int]:
        """Every valid entry by node ID, and the revision the list was read at."""
        kvs, revision = self._etcd.list_prefix(self._keys.registry)
        nodes: dict[int, NodeInfo] = {}
        for key, raw in kvs:
            info = self._decode(key, raw)
            if info is not None:
                nodes[info.node_id] = info
        return nodes, revision

    def listing(self) -> Listing[int, NodeInfo, int]:
        nodes, revision = self.entries()
        return Listing(nodes, revision)

    def _decode(self, key: str, raw: bytes) -> NodeInfo | None:
        """A registry value, or None (logged) when it is corrupt: one bad entry must not stop
        the mesh towards every other node."""
        try:
            info = NodeInfo.from_json(load(raw, key))
        except (NodeInfoError, CniError) as exc:
            log.error("ignoring registry key %s: %s", key, exc)
            return None
        if key != self._keys.entry(info.node_id):
            log.error("ignoring registry key %s: it holds node ID %d", key, info.node_id)
            return None
        return info

    def watch(self, after: int) -> NodeStream:
        """The changes after revision `after`, as a stream (closing it cancels the watch).
        Raises WatchExpired when `after` is compacted away, CniError when etcd is away."""
        stream: NodeStream = CallbackStream()

        def on_response(item: WatchItem) -> None:
            if item is None:
                stream.end()
            elif isinstance(item, Compacted):
                stream.end(WatchExpired(str(item)))
            elif isinstance(item, CniError):
                stream.end(item)
            else:
                stream.push(e for e in map(self._event, item) if e is not None)

        try:
            watch_id = self._etcd.watch_prefix(self._keys.registry, after + 1, on_response)
        except Compacted as exc:
            raise WatchExpired(str(exc)) from exc
        stream.cancel = lambda: self._etcd.cancel_watch(watch_id)
        return stream

    def _event(self, event: KeyEvent) -> Put[int, NodeInfo, int] | Delete[int, int] | None:
        try:
            node_id = int(event.key[len(self._keys.registry):])
        except ValueError:
            log.error("ignoring registry key %s: not a node ID", event.key)
            return None
        if event.value is None:
            return Delete(node_id, event.revision)
        info = self._decode(event.key, event.value)
        return None if info is None else Put(node_id, info, event.revision)

    # ---- liveness ---------------------------------------------------------------------------

    def grant_alive(self, node_id: int, ttl: int = ALIVE_TTL) -> int:
        """A new lease with alive/<ID> on it; returns the lease ID."""
        lease = self._etcd.grant_lease(ttl)
        self._etcd.put(self._keys.alive(node_id), b"1", lease=lease)
        return lease

    def refresh_alive(self, lease_id: int) -> bool:
        """Keeps the lease alive; False when etcd no longer knows it (expired)."""
        return self._etcd.refresh_lease(lease_id)

    def revoke_alive(self, lease_id: int) -> None:
        """Ends the lease at once (a clean stop): alive/<ID> goes with it."""
        self._etcd.revoke_lease(lease_id)

    def is_alive(self, node_id: int) -> bool:
        return self._etcd.get(self._keys.alive(node_id))[0] is not None

    # ---- removal (operator) -----------------------------------------------------------------

    def delete_node(self, node_name: str, node_id: int, name_held: bool = True) -> bool:
        """Removes the node's entry, liveness, ID keys, pod records and allocations in one
        transaction; False when the name's ID key vanished meanwhile (a concurrent removal)."""
        keys = self._keys
        name_key = keys.node_name(node_name)
        pods, ipam = keys.pods(node_id), keys.allocations(node_id)
        compare = [tx.Version(name_key) > 0] if name_held else []
        ops = [
            tx.Delete(keys.entry(node_id)),
            tx.Delete(keys.alive(node_id)),
            tx.Delete(name_key),
            tx.Delete(keys.node_id(node_id)),
            removal_mark(keys, node_name, node_id),
            tx.Delete(pods, range_end=prefix_end(pods)),
            tx.Delete(ipam, range_end=prefix_end(ipam)),
        ]
        return self._etcd.txn(f"remove node {node_name}", compare, ops)

    def removal_marked(self, node_name: str) -> bool:
        """Whether an operator removed the node: `delete_node` and `release_node_id` leave the
        mark in the same transaction, so an entry gone without it is data etcd lost."""
        return self.store.removal_marked(node_name)

    def node_id_of(self, node_name: str) -> int | None:
        return self.store.node_ids().get(node_name)


class Liveness:
    """Keeps alive/<ID> present while this agent runs (a supervised loop; etcd outages
    survived: an expired lease is granted anew once etcd answers again)."""

    def __init__(self, registry: Registry, node_id: int, ttl: int = ALIVE_TTL) -> None:
        self.registry = registry
        self.node_id = node_id
        self.ttl = ttl
        self._lease: int | None = None
        # no backoff beyond the interval: a lease not refreshed within its TTL is gone
        self._loop = SupervisedLoop("registry-alive", self._keep, ttl / 3, immediately=True,
                                    backoff=(ttl / 3, ttl / 3), expected=(CniError,), log=log)

    def start(self) -> None:
        self._loop.start()

    def _keep(self) -> None:
        try:
            if self._lease is None or not self.registry.refresh_alive(self._lease):
                self._lease = self.registry.grant_alive(self.node_id, self.ttl)
        except CniError:
            self._lease = None  # granted anew next time (it expires meanwhile, if etcd lost it)
            raise

    def stop(self) -> None:
        """A clean stop ends the lease: the node may be removed right away."""
        self._loop.stop(timeout=5)
        if self._lease is not None:
            try:
                self.registry.revoke_alive(self._lease)
            except CniError as exc:  # it expires by itself within the TTL
                log.debug("revoking the liveness lease: %s", exc)

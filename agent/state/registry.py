"""The node registry in etcd: every agent publishes its node here and watches everyone else's.

Keys under the agent's prefix (docs/etcd-keys.md):

    registry/<node ID>   NodeInfo as JSON; written by the node's agent at start, removed only by
                         the operator's `node remove` (an agent that stops leaves it: its pods
                         stay wired and reachable)
    alive/<node ID>      "1", attached to a lease the node's agent keeps alive (TTL `ALIVE_TTL`):
                         gone within the TTL after the agent died; `node remove` refuses a node
                         whose key is there unless forced

`Registry` is a `Store` on its own etcd connection: the watch stream lives beside the request
path's channel, so the store's failover (which drops the client's stubs) never cuts the watch,
and etcd errors are translated by the store's one `_call`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyetcd import events as etcd_events
from pyetcd import transactions as tx

from agent.model.errors import CniError
from agent.model.node import NodeInfo, NodeInfoError
from agent.state.store import Store, dump, load

log = logging.getLogger(__name__)

ALIVE_TTL = 10  # seconds a dead agent's node still counts as live


@dataclass(frozen=True)
class NodeEvent:
    """One change seen by the watch: `info` for a put, None for a delete of `node_id`."""

    node_id: int
    info: NodeInfo | None
    revision: int


WatchItem = list[NodeEvent] | BaseException | None  # None: the stream ended


class Registry(Store):
    """Publish, list, watch and remove registry entries; liveness leases."""

    def _entry_key(self, node_id: int) -> str:
        return f"{self.prefix}registry/{node_id}"

    def _alive_key(self, node_id: int) -> str:
        return f"{self.prefix}alive/{node_id}"

    @property
    def registry_prefix(self) -> str:
        return f"{self.prefix}registry/"

    # ---- entries ----------------------------------------------------------------------------

    def publish(self, info: NodeInfo) -> None:
        key = self._entry_key(info.node_id)
        value = dump(info.to_json())
        self._call(f"publish {key}", lambda: self._client.put(key, value))

    def entries(self) -> tuple[dict[int, NodeInfo], int]:
        """Every valid entry by node ID, and the revision the list was read at."""
        prefix = self.registry_prefix
        resp = self._call(f"list {prefix}", lambda: self._client.get_prefix_response(prefix))
        nodes: dict[int, NodeInfo] = {}
        for kv in resp.kvs:
            info = self._decode(kv.key.decode(), kv.value)
            if info is not None:
                nodes[info.node_id] = info
        return nodes, int(resp.header.revision)

    def _decode(self, key: str, raw: bytes) -> NodeInfo | None:
        """A registry value, or None (logged) when it is corrupt: one bad entry must not stop
        the mesh towards every other node."""
        try:
            info = NodeInfo.from_json(load(raw, key))
        except (NodeInfoError, CniError) as exc:
            log.error("ignoring registry key %s: %s", key, exc)
            return None
        if key != self._entry_key(info.node_id):
            log.error("ignoring registry key %s: it holds node ID %d", key, info.node_id)
            return None
        return info

    def watch(self, start_revision: int, sink: Callable[[WatchItem], None]) -> int:
        """Streams changes from `start_revision` on into `sink` (events, or the error that ended
        the stream: a compaction, a broken connection). Returns the watch ID for `cancel`."""
        prefix = self.registry_prefix

        def on_response(resp: Any) -> None:
            if resp is None or isinstance(resp, BaseException):
                sink(resp)
                return
            sink([e for e in map(self._event, resp.events) if e is not None])

        return int(
            self._call(
                f"watch {prefix}",
                lambda: self._client.add_watch_prefix_callback(
                    prefix, on_response, start_revision=start_revision
                ),
            )
        )

    def _event(self, event: Any) -> NodeEvent | None:
        key = event.key.decode()
        try:
            node_id = int(key[len(self.registry_prefix) :])
        except ValueError:
            log.error("ignoring registry key %s: not a node ID", key)
            return None
        revision = int(event.mod_revision)
        if isinstance(event, etcd_events.DeleteEvent):
            return NodeEvent(node_id, None, revision)
        info = self._decode(key, event.value)
        return None if info is None else NodeEvent(node_id, info, revision)

    def cancel(self, watch_id: int) -> None:
        try:
            self._client.cancel_watch(watch_id)
        except Exception as exc:  # the stream is gone already: nothing to cancel
            log.debug("cancelling watch %d: %s", watch_id, exc)

    # ---- liveness ---------------------------------------------------------------------------

    def grant_alive(self, node_id: int, ttl: int = ALIVE_TTL) -> int:
        """A new lease with alive/<ID> on it; returns the lease ID."""
        lease = self._call("grant lease", lambda: self._client.lease(ttl))
        key = self._alive_key(node_id)
        self._call(f"put {key}", lambda: self._client.put(key, b"1", lease=lease.id))
        return int(lease.id)

    def refresh_alive(self, lease_id: int) -> bool:
        """Keeps the lease alive; False when etcd no longer knows it (expired)."""
        replies = self._call("refresh lease", lambda: list(self._client.refresh_lease(lease_id)))
        return bool(replies) and int(replies[0].TTL) > 0

    def revoke_alive(self, lease_id: int) -> None:
        """Ends the lease at once (a clean stop): alive/<ID> goes with it."""
        self._call("revoke lease", lambda: self._client.revoke_lease(lease_id))

    def is_alive(self, node_id: int) -> bool:
        raw, _meta = self._get(self._alive_key(node_id))
        return raw is not None

    # ---- removal (operator) -----------------------------------------------------------------

    def delete_node(self, node_name: str, node_id: int, name_held: bool = True) -> bool:
        """Removes the node's entry, liveness, ID keys, pod records and allocations in one
        transaction; False when the name's ID key vanished meanwhile (a concurrent removal)."""
        name_key = self._node_name_key(node_name)
        pods = f"{self.prefix}pods/{node_id}/"
        ipam = f"{self.prefix}ipam/{node_id}/"
        compare = [tx.Version(name_key) > 0] if name_held else []
        ops = [
            tx.Delete(self._entry_key(node_id)),
            tx.Delete(self._alive_key(node_id)),
            tx.Delete(name_key),
            tx.Delete(self._node_id_key(node_id)),
            self._removal_mark(node_name, node_id),
            tx.Delete(pods, range_end=_prefix_end(pods)),
            tx.Delete(ipam, range_end=_prefix_end(ipam)),
        ]
        return self._txn(f"remove node {node_name}", compare, ops)

    def removal_marked(self, node_name: str) -> bool:
        """Whether an operator removed the node: `delete_node` and `release_node_id` leave the
        mark in the same transaction, so an entry gone without it is data etcd lost."""
        return self._get(self._node_removed_key(node_name))[0] is not None

    def node_id_of(self, node_name: str) -> int | None:
        return self.node_ids().get(node_name)


def _prefix_end(prefix: str) -> bytes:
    raw = bytearray(prefix.encode())
    raw[-1] += 1  # every prefix here ends in "/": the next byte is "0", never an overflow
    return bytes(raw)


class Liveness:
    """Keeps alive/<ID> present while this agent runs (a daemon thread; etcd outages survived:
    an expired lease is granted anew once etcd answers again)."""

    def __init__(self, registry: Registry, node_id: int, ttl: int = ALIVE_TTL) -> None:
        self.registry = registry
        self.node_id = node_id
        self.ttl = ttl
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="registry-alive", daemon=True)
        self._lease: int | None = None

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._lease is None or not self.registry.refresh_alive(self._lease):
                    self._lease = self.registry.grant_alive(self.node_id, self.ttl)
            except CniError as exc:
                log.debug("liveness lease: %s", exc)
                self._lease = None
            self._stop.wait(self.ttl / 3)

    def stop(self) -> None:
        """A clean stop ends the lease: the node may be removed right away."""
        self._stop.set()
        self._thread.join(timeout=5)
        if self._lease is not None:
            try:
                self.registry.revoke_alive(self._lease)
            except CniError as exc:  # it expires by itself within the TTL
                log.debug("revoking the liveness lease: %s", exc)

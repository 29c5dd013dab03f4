"""The agent's etcd prefix as one object: cluster-wide node IDs, per-node pod records and IP
allocations, over one etcd connection.

Every write that must not be seen half done is one etcd transaction: a node ID claim writes the
id->name and name->id keys together; a pod record is written or deleted together with one
allocation key per pod address. The parts, one module each:

    etcd_client.py      the connection, and the one place where etcd errors become agent errors
    etcd_keys.py        the key layout and value format (docs/etcd-keys.md)
    id_bindings.py      node IDs: claim, bind again, release, list; the bindings held here
    pod_allocations.py  pod records and allocation keys, guarded by the held binding

`etcd` and `keys` are public for the node registry (agent/state/registry), which keeps its own
keys on a store of its own.
"""

from __future__ import annotations

from typing import Any

from agent.model.pod import PodKey, PodRecord
from agent.state.etcd_client import EtcdClient
from agent.state.etcd_keys import EtcdKeys
from agent.state.etcd_tls import EtcdTLS
from agent.state.id_bindings import Binding, NodeIdBindings
from agent.state.pod_allocations import PodAllocations


class Store:
    """Node IDs, pod records and allocations. Thread-safe (the client is)."""

    def __init__(
        self,
        endpoints: list[str],
        prefix: str = "/vswitch-cni/",
        timeout: float = 2.0,
        tls: EtcdTLS | None = None,
    ) -> None:
        self.etcd = EtcdClient(endpoints, timeout, tls)
        self.keys = EtcdKeys(prefix)
        self._ids = NodeIdBindings(self.etcd, self.keys)
        self._pods = PodAllocations(self.etcd, self.keys, self._ids)

    @property
    def prefix(self) -> str:
        return self.keys.prefix

    @property
    def endpoints(self) -> list[str]:
        return self.etcd.endpoints

    # ---- node IDs (cluster-wide): agent/state/id_bindings -----------------------------------

    def claim_node_id(self, node_name: str, max_id: int) -> int:
        """The node's ID: the one it holds already, else the smallest free one (1-based)."""
        return self._ids.claim(node_name, max_id)

    def bind_node_id(self, node_name: str, node_id: int) -> Binding:
        """Makes sure `node_id` is bound to `node_name` again (see NodeIdBindings.bind)."""
        return self._ids.bind(node_name, node_id)

    def release_node_id(self, node_name: str) -> bool:
        """Frees the node's ID (explicit operator action); False if it held none."""
        return self._ids.release(node_name)

    def node_ids(self) -> dict[str, int]:
        """Node name -> node ID, for every node holding one."""
        return self._ids.by_name()

    def removal_marked(self, node_name: str) -> bool:
        """Whether an operator removed the node (node remove, agent.nodes release)."""
        return self._ids.removal_marked(node_name)

    # ---- pods and their allocations (per node): agent/state/pod_allocations -----------------

    def put_pod(self, node_id: int, record: PodRecord) -> None:
        self._pods.put_pod(node_id, record)

    def update_pod(
        self, node_id: int, record: PodRecord, previous: PodRecord | None = None
    ) -> None:
        self._pods.update_pod(node_id, record, previous)

    def delete_pod(
        self, node_id: int, key: PodKey, known: PodRecord | None = None
    ) -> PodRecord | None:
        return self._pods.delete_pod(node_id, key, known)

    def get_pod(self, node_id: int, key: PodKey) -> PodRecord | None:
        return self._pods.get_pod(node_id, key)

    def list_pods(self, node_id: int) -> list[PodRecord]:
        return self._pods.list_pods(node_id)

    def list_allocations(self, node_id: int) -> dict[str, dict[str, Any]]:
        """IP -> {container_id, ifname, pod_namespace, pod_name, since}."""
        return self._pods.list_allocations(node_id)

    # ---- health -----------------------------------------------------------------------------

    def ping(self) -> None:
        """Raises TryAgainLater when no etcd member answers a read."""
        self.etcd.get(self.keys.ping)

    def close(self) -> None:
        self.etcd.close()

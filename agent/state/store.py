"""The agent's etcd prefix as one object: cluster-wide node IDs, per-node pod records and IP
allocations, over one etcd connection.

Every write that must not be seen half done is one etcd transaction: a node ID claim writes the
id->name and name->id keys together; a pod record is written or deleted together with one
allocation key per pod address. The parts, one module each:

    etcd_client.py      the connection, and the one place where etcd errors become agent errors
    etcd_keys.py        the key layout and value format (docs/etcd-keys.md)
    id_bindings.py      node IDs: claim, bind again, release, list; the bindings held here
    pod_allocations.py  pod records and allocation keys, guarded by the held binding (the
                        Store's own methods: it is a PodAllocations with node IDs besides)

`etcd` and `keys` are public for the node registry (agent/state/registry), which keeps its own
keys on a store of its own.
"""

from __future__ import annotations

from agent.state.etcd_client import EtcdClient
from agent.state.etcd_keys import EtcdKeys
from agent.state.etcd_tls import EtcdTLS
from agent.state.id_bindings import Binding, NodeIdBindings
from agent.state.pod_allocations import PodAllocations


class Store(PodAllocations):
    """Node IDs, pod records and allocations. Thread-safe (the client is).

    The pod records and their allocations are the store's own methods (put_pod, update_pod,
    delete_pod, get_pod, list_pods, list_allocations: agent/state/pod_allocations), so the
    writes of every ADD and DEL go to etcd with no layer between; the node IDs are
    agent/state/id_bindings', through the methods below."""

    def __init__(
        self,
        endpoints: list[str],
        prefix: str = "/vswitch-cni/",
        timeout: float = 2.0,
        tls: EtcdTLS | None = None,
    ) -> None:
        etcd = EtcdClient(endpoints, timeout, tls)
        keys = EtcdKeys(prefix)
        super().__init__(etcd, keys, NodeIdBindings(etcd, keys))

    @property
    def prefix(self) -> str:
        return self.keys.prefix

    @property
    def endpoints(self) -> list[str]:
        return self.etcd.endpoints

    # ---- node IDs (cluster-wide): agent/state/id_bindings -----------------------------------

    def claim_node_id(self, node_name: str, max_id: int) -> int:
        """The node's ID: the one it holds already, else the smallest free one (1-based)."""
        return self.ids.claim(node_name, max_id)

    def bind_node_id(self, node_name: str, node_id: int) -> Binding:
        """Makes sure `node_id` is bound to `node_name` again (see NodeIdBindings.bind)."""
        return self.ids.bind(node_name, node_id)

    def release_node_id(self, node_name: str) -> bool:
        """Frees the node's ID (explicit operator action); False if it held none."""
        return self.ids.release(node_name)

    def node_ids(self) -> dict[str, int]:
        """Node name -> node ID, for every node holding one."""
        return self.ids.by_name()

    def removal_marked(self, node_name: str) -> bool:
        """Whether an operator removed the node (node remove, agent.nodes release)."""
        return self.ids.removal_marked(node_name)

    # ---- health -----------------------------------------------------------------------------

    def ping(self) -> None:
        """Raises TryAgainLater when no etcd member answers a read."""
        self.etcd.get(self.keys.ping)

    def close(self) -> None:
        self.etcd.close()

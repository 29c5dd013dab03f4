"""The compiler's index of the cluster, kept between the controller's compiles.

A fresh `policy.Cluster` per compile costs a read of every pod of the cluster (seconds at
150,000 pods), and the controller compiles after every burst of events and in every ADD. Kept
here, each compile first hands the index what changed since the last one: the pods whose object
is not the same (the reflector replaces a pod's object when it changes, so identity tells),
and those gone; `Cluster.update` then forgets only the memos of their namespaces. A change of
any Namespace (its labels, one more or less) rebuilds it: rare, and it changes what namespace
selectors match. The result is what a fresh compile gives (tests/policy's property test of
`Cluster.update`).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping

from policy import Compiled, Namespace, NetworkPolicy, Pod, PodKey
from policy.cluster import Cluster
from policy.compiler import compile_cluster
from policy.model import IPAddress


class KeptIndex:
    """One index, one compile at a time (the loop's and the ADDs' compiles share it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cluster: Cluster | None = None
        self._pods: dict[PodKey, Pod] = {}
        self._namespaces: dict[str, Namespace] = {}
        self.rebuilds = 0  # fresh indexes made (the first, and one per Namespace change)
        self.updates = 0  # compiles that updated the index with changed pods

    def compile(self, pods: Mapping[PodKey, Pod], namespaces: Mapping[str, Namespace],
                policies: Iterable[NetworkPolicy], *, sctp: bool,
                node_addresses: Mapping[str, Iterable[IPAddress]],
                only: Collection[PodKey] | None) -> Compiled:
        """`policy.compile_policies(pods.values(), namespaces.values(), policies, ...)`."""
        with self._lock:
            try:
                cluster = self._synced(pods, namespaces)
                return compile_cluster(cluster, policies, sctp=sctp,
                                       node_addresses=node_addresses, only=only)
            except Exception:
                self._cluster = None  # half updated, perhaps: the next compile starts anew
                raise

    def _synced(self, pods: Mapping[PodKey, Pod], namespaces: Mapping[str, Namespace]
                ) -> Cluster:
        cluster = self._cluster
        if cluster is None or namespaces != self._namespaces:  # equal: same names, labels
            cluster = self._cluster = Cluster(pods.values(), namespaces.values())
            self.rebuilds += 1
        else:
            old = self._pods
            changed = [pod for key, pod in pods.items() if old.get(key) is not pod]
            removed = [key for key in old if key not in pods]
            if changed or removed:
                cluster.update(changed, removed)
                self.updates += 1
        self._pods, self._namespaces = dict(pods), dict(namespaces)
        return cluster

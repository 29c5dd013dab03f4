"""The compiler's index of the cluster, kept between the controller's compiles.

A fresh `policy.Cluster` per compile costs a read of every pod of the cluster (seconds at
150,000 pods), and the controller compiles after every burst of events and in every ADD. Kept
here, each compile first asks the source for the pods changed since the last one (the
reflector's journal: `pod_changes(token)`, no copy of the others) and lays this node's own pods
over them (the records' view: their addresses before the API has them); `Cluster.update` then
forgets only the memos of the namespaces those pods are in. The whole cache comes back on the
first compile and after the reflector listed again, and rebuilds the index; so does a change of
any Namespace (its labels, one more or less): rare, and it changes what namespace selectors
match. The result is what a fresh compile gives (tests/policy's property test of
`Cluster.update`, tests/netpol/test_index.py against a fresh compile).

A compile's result is kept too, with what it read of the index (`policy.cluster.Reads`: per
namespace the selectors it matched there, the pods it read by key). The next compile of the
same pods under the same policies returns it as it is, the same object, while no pod changed
since matches one of those selectors, before or after its change: most of a cluster's pod
events touch none of the node's pods' peers, and then cost the node a journal read instead of a
compile and a comparison of every rule (issue #39).

It also keeps which of the cache's pods are scheduled to this node (`node`; neither
host-network nor Succeeded or Failed): a compile with `scheduled=True` compiles them too, so
that the controller can make their rules before their ADD (the kubelet starts a sandbox well
after the pod is bound to the node).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from agent.infra.listwatch import Changes
from policy import Compiled, Namespace, NetworkPolicy, Pod, PodKey
from policy.cluster import Cluster, Reads, Touched
from policy.compiler import compile_cluster
from policy.model import IPAddress

PodChanges = Callable[[tuple[int, int] | None], Changes[PodKey, Pod]]
KEPT_RESULTS = 4  # compiles kept, by the pods they were for (the loop's, an ADD's)


@dataclass
class _Kept:
    """A compile's result and what it was made from."""

    compiled: Compiled
    local: dict[PodKey, Pod]  # the node's pods laid over the cache (compared by identity)
    policies: list[NetworkPolicy]  # (by identity: the cache keeps an unchanged one's object)
    node_addresses: dict[str, tuple[IPAddress, ...]]
    reads: Reads  # what it read of the index

    def holds(self, local: Mapping[PodKey, Pod], policies: list[NetworkPolicy],
              node_addresses: dict[str, tuple[IPAddress, ...]]) -> bool:
        return (len(policies) == len(self.policies)
                and all(a is b for a, b in zip(policies, self.policies, strict=True))
                and local.keys() == self.local.keys()
                and all(local[k] is p for k, p in self.local.items())
                and node_addresses == self.node_addresses)


class KeptIndex:
    """One index, one compile at a time (the loop's and the ADDs' compiles share it)."""

    def __init__(self, node: str = "") -> None:
        self.node = node
        self._scheduled: set[PodKey] = set()  # the cache's pods on `node`
        self._lock = threading.Lock()
        self._cluster: Cluster | None = None
        self._token: tuple[int, int] | None = None  # the source's, as of the last compile
        self._cache: dict[PodKey, Pod] = {}  # the source's pods as of that token
        self._local: dict[PodKey, Pod] = {}  # this node's pods laid over them last time
        self._pods: dict[PodKey, Pod] = {}  # what the index holds: the cache under the local
        self._namespaces: dict[str, Namespace] = {}
        self._kept: dict[frozenset[PodKey] | None, _Kept] = {}  # by `only`
        self.rebuilds = 0  # fresh indexes made (the first, relists, Namespace changes)
        self.updates = 0  # compiles that updated the index with changed pods
        self.reused = 0  # compiles answered with a kept result

    def compile(self, changes: PodChanges, local: Mapping[PodKey, Pod],
                namespaces: Mapping[str, Namespace], policies: Iterable[NetworkPolicy], *,
                sctp: bool, node_addresses: Mapping[str, Iterable[IPAddress]],
                only: Collection[PodKey] | None, scheduled: bool = False) -> Compiled:
        """`policy.compile_policies` over the source's pods with `local` laid over them;
        `scheduled`: `only` and the cache's pods scheduled to the node."""
        with self._lock:
            try:
                cluster = self._synced(changes(self._token), local, namespaces)
                if scheduled and only is not None:
                    only = {*only, *self._scheduled}
                key = None if only is None else frozenset(only)
                policies = list(policies)
                nodes = {n: tuple(a) for n, a in node_addresses.items()}
                kept = self._kept.get(key)
                if kept is not None and kept.holds(local, policies, nodes):
                    self.reused += 1
                    self._kept[key] = self._kept.pop(key)  # the newest: evicted last
                    return kept.compiled
                reads = cluster.reading()
                compiled = compile_cluster(cluster, policies, sctp=sctp,
                                           node_addresses=nodes, only=only)
                if len(self._kept) >= KEPT_RESULTS:
                    self._kept.pop(next(iter(self._kept)))
                self._kept[key] = _Kept(compiled, dict(local), policies, nodes, reads)
                return compiled
            except Exception:
                self._cluster, self._token = None, None  # half updated: the next one anew
                self._kept.clear()
                raise

    def _synced(self, got: Changes[PodKey, Pod], local: Mapping[PodKey, Pod],
                namespaces: Mapping[str, Namespace]) -> Cluster:
        touched: Iterable[PodKey] = got.changed
        if got.full is not None:
            self._cache = dict(got.full)
            self._scheduled = {k for k, p in self._cache.items() if self._on_node(p)}
        else:
            for key, pod in got.changed.items():
                if pod is None:
                    self._cache.pop(key, None)
                else:
                    self._cache[key] = pod
                if pod is not None and self._on_node(pod):
                    self._scheduled.add(key)
                else:
                    self._scheduled.discard(key)
        self._token = got.token
        cluster = self._cluster
        if cluster is None or got.full is not None or namespaces != self._namespaces:
            self._pods = {**self._cache, **local}
            cluster = self._cluster = Cluster(self._pods.values(), namespaces.values())
            self.rebuilds += 1
            self._kept.clear()
        else:
            changed, removed = [], []
            for key in {*touched, *local, *self._local}:
                pod = local.get(key) or self._cache.get(key)
                old = self._pods.get(key)
                if pod is None:
                    if old is not None:
                        removed.append(key)
                        del self._pods[key]
                elif pod is not old:  # the reflector replaces an object that changed
                    changed.append(pod)
                    self._pods[key] = pod
            if changed or removed:
                self._forget(cluster.update(changed, removed))
                self.updates += 1
        self._local, self._namespaces = dict(local), dict(namespaces)
        return cluster

    def _on_node(self, pod: Pod) -> bool:
        return bool(self.node) and pod.node == self.node and not pod.host_network \
            and not pod.terminated

    def _forget(self, changes: list[Touched] | None) -> None:
        """Drops the kept results whose reads see one of the pod `changes` (None: the set of
        namespaces changed, which any namespace selector may see)."""
        for key, kept in list(self._kept.items()):
            if changes is None or kept.reads.see(changes):
                del self._kept[key]

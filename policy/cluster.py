"""The compiler's index of the cluster: pods by key, node, namespace and label set, namespace
labels, every pod address on the number line; selectors evaluated once per distinct label set
and memoized.

Pods that share a label set (the replicas of a Deployment) are matched once, which keeps a
thousand policies over thousands of pods cheap. Host-network pods are left out: NetworkPolicy
neither selects them nor sees them as peers (their traffic carries the node's address, which is
exempt anyway). A namespace with pods but no Namespace object (the snapshot may be mid-update)
has the one label the API server would give it, `kubernetes.io/metadata.name`.

The index can be kept between compilations: `update(changed, removed)` applies pod changes in
O(changed pods) and forgets only the memos of the namespaces they are in (and, when a namespace
appears or goes, of the namespace selectors), so a compile after an event elsewhere in the
cluster redoes what that event touched, not the cluster. A selector's PeerSet stays the same
object while its namespaces are untouched.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping

from policy import addresses
from policy.addresses import AddressSet
from policy.model import (
    EVERYTHING,
    IPAddress,
    LabelSelector,
    Namespace,
    NetworkPolicy,
    Peer,
    Pod,
    PodKey,
    PolicyError,
)
from policy.rules import PeerSet

_LabelKey = frozenset[tuple[str, str]]
_Group = tuple[Mapping[str, str], dict[PodKey, Pod]]


class Cluster:
    def __init__(self, pods: Iterable[Pod], namespaces: Iterable[Namespace]) -> None:
        self._declared: dict[str, Mapping[str, str]] = {}  # Namespace objects' labels
        for ns in namespaces:
            if ns.name in self._declared:
                raise PolicyError("namespaces", ns.name, "two Namespaces of one name")
            self._declared[ns.name] = ns.labels
        self.ns_labels: dict[str, Mapping[str, str]] = dict(self._declared)
        self._pods: dict[PodKey, Pod] = {}
        self._by_node: dict[str, set[PodKey]] = {}
        self._groups: dict[str, dict[_LabelKey, _Group]] = {}  # namespace -> label set -> pods
        self._points: list[tuple[int, PodKey, IPAddress]] = []  # sorted: "which pods lie in"
        # memos, per namespace where a pod change must forget them
        self._selected: dict[str, dict[LabelSelector, list[Pod]]] = {}
        self._namespaces: dict[LabelSelector, list[str]] = {}
        self._addresses: dict[str, dict[LabelSelector, AddressSet]] = {}
        self._sets: dict[str, PeerSet] = {}
        self._chosen: set[str] = set()  # the sets whose namespaces a namespace selector chose
        self._sets_in: dict[str, set[str]] = {}  # namespace -> the sets spanning it
        # what compiling a policy warns about, by (id, sctp), with the policy object (the
        # compiler's memo: policies outlive pod events)
        self.notes: dict[tuple[int, bool], tuple[NetworkPolicy, frozenset[str]]] = {}
        seen: set[PodKey] = set()
        for pod in pods:
            if pod.key in seen:
                raise PolicyError("pods", str(pod.key), "two Pods of one namespace and name")
            seen.add(pod.key)
            self._add(pod, index=False)
        self._points.sort()

    # --- changes --------------------------------------------------------------------------

    def update(self, changed: Iterable[Pod], removed: Iterable[PodKey]) -> None:
        """Pods added or changed (a pod of a key already indexed replaces it) and removed."""
        namespaces_before = set(self.ns_labels)
        touched: set[str] = set()
        for key in removed:
            if key in self._pods:
                touched.add(key.namespace)
                self._remove(key)
        for pod in changed:
            touched.add(pod.namespace)
            if pod.key in self._pods:
                self._remove(pod.key)
            self._add(pod, index=True)
        for ns in list(self.ns_labels):  # a namespace known only from its pods, now empty
            if ns not in self._declared and not self._groups.get(ns):
                del self.ns_labels[ns]
                self._groups.pop(ns, None)
        if set(self.ns_labels) != namespaces_before:
            self._namespaces.clear()  # a namespace selector may match another set now
            self._sets = {k: s for k, s in self._sets.items() if k not in self._chosen}
        for ns in touched:
            self._selected.pop(ns, None)
            self._addresses.pop(ns, None)
            for name in self._sets_in.pop(ns, ()):
                self._sets.pop(name, None)

    def _add(self, pod: Pod, index: bool) -> None:
        if pod.host_network:
            return
        self._pods[pod.key] = pod
        self._by_node.setdefault(pod.node, set()).add(pod.key)
        if pod.namespace not in self.ns_labels:
            self.ns_labels[pod.namespace] = Namespace(pod.namespace).labels
        groups = self._groups.setdefault(pod.namespace, {})
        groups.setdefault(frozenset(pod.labels.items()), (pod.labels, {}))[1][pod.key] = pod
        for ip in pod.ips:
            entry = (addresses.point(ip), pod.key, ip)
            if index:
                bisect.insort(self._points, entry)
            else:
                self._points.append(entry)

    def _remove(self, key: PodKey) -> None:
        pod = self._pods.pop(key)
        self._by_node[pod.node].discard(key)
        groups = self._groups[pod.namespace]
        label_key = frozenset(pod.labels.items())
        del groups[label_key][1][key]
        if not groups[label_key][1]:
            del groups[label_key]
        for ip in pod.ips:
            i = bisect.bisect_left(self._points, (addresses.point(ip), key, ip))
            del self._points[i]

    # --- reads ----------------------------------------------------------------------------

    @property
    def pods(self) -> list[Pod]:
        """Every (non-host-network) pod, by key."""
        return [self._pods[k] for k in sorted(self._pods)]

    def on_node(self, node: str | None) -> list[Pod]:
        """The pods of `node` (None: every pod), by key."""
        if node is None:
            return self.pods
        return [self._pods[k] for k in sorted(self._by_node.get(node, ()))]

    def get(self, key: PodKey) -> Pod | None:
        return self._pods.get(key)

    def pods_within(self, within: AddressSet) -> Iterator[tuple[Pod, IPAddress]]:
        """Every (pod, address) with the address in `within`, by address."""
        for first, last in within:
            i = bisect.bisect_left(self._points, (first,))
            while i < len(self._points) and self._points[i][0] <= last:
                _, key, ip = self._points[i]
                yield self._pods[key], ip
                i += 1

    def select(self, namespace: str, selector: LabelSelector) -> list[Pod]:
        """The pods of `namespace` that `selector` matches."""
        memo = self._selected.setdefault(namespace, {})
        found = memo.get(selector)
        if found is None:
            found = [pod for labels, pods in self._groups.get(namespace, {}).values()
                     if selector.matches(labels) for pod in pods.values()]
            memo[selector] = found
        return found

    def namespaces(self, selector: LabelSelector) -> list[str]:
        found = self._namespaces.get(selector)
        if found is None:
            found = sorted(n for n, labels in self.ns_labels.items() if selector.matches(labels))
            self._namespaces[selector] = found
        return found

    def _addresses_of(self, namespace: str, selector: LabelSelector) -> AddressSet:
        memo = self._addresses.setdefault(namespace, {})
        found = memo.get(selector)
        if found is None:
            found = addresses.of_addresses(ip for pod in self.select(namespace, selector)
                                           for ip in pod.ips)
            memo[selector] = found
        return found

    def peer_addresses(self, policy_namespace: str, peer: Peer) -> AddressSet:
        """The addresses one `from`/`to` element stands for."""
        if peer.ip_block is not None:
            block = peer.ip_block
            holes = addresses.union(addresses.of_network(e) for e in block.excepts)
            return addresses.subtract(addresses.of_network(block.cidr), holes)
        pods = peer.pod_selector if peer.pod_selector is not None else EVERYTHING
        spaces = [policy_namespace] if peer.namespace_selector is None \
            else self.namespaces(peer.namespace_selector)
        return addresses.union(self._addresses_of(ns, pods) for ns in spaces)

    def peer_set(self, policy_namespace: str, peer: Peer) -> PeerSet | None:
        """The shared set a selector peer stands for (None for an ipBlock: its addresses
        never change with pods). Named by the selector alone: its namespace scope (the
        policy's namespace, or the namespaceSelector) and its podSelector."""
        if peer.ip_block is not None:
            return None
        pods = peer.pod_selector if peer.pod_selector is not None else EVERYTHING
        scope = f"ns={policy_namespace}" if peer.namespace_selector is None \
            else f"nssel={selector_text(peer.namespace_selector)}"
        name = hashlib.sha256(f"{scope};pods={selector_text(pods)}".encode()).hexdigest()[:16]
        found = self._sets.get(name)
        if found is None:
            if peer.namespace_selector is None:
                spaces = [policy_namespace]
            else:
                spaces = self.namespaces(peer.namespace_selector)
                self._chosen.add(name)
            members = sorted((ip for ns in spaces for pod in self.select(ns, pods)
                              for ip in pod.ips), key=addresses.point)
            found = self._sets[name] = PeerSet(name, tuple(members))
            for ns in spaces:
                self._sets_in.setdefault(ns, set()).add(name)
        return found


def selector_text(selector: LabelSelector) -> str:
    """A selector as text that is the same for equal selectors in every process (frozensets
    iterate in an order that varies with the process's string hashing)."""
    terms = sorted([r.key, r.operator, sorted(r.values)] for r in selector.match_expressions)
    return json.dumps([sorted(selector.match_labels), terms], separators=(",", ":"))

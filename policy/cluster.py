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
from dataclasses import dataclass, field

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
# a pod change: its key, the pod before and after (None: absent, or host-network, then)
Touched = tuple[PodKey, Pod | None, Pod | None]
_Group = tuple[Mapping[str, str], dict[PodKey, Pod]]


@dataclass
class Reads:
    """What a compile's reads of the index depended on: per namespace the selectors matched
    against its pods, the pods read by key, or every pod (`every_pod`: a walk of the cluster's
    addresses or of a node's pods). A compile none of whose reads sees a change gives the same
    result again (agent/netpol/index.py keeps it)."""

    selectors: dict[str, set[LabelSelector]] = field(default_factory=dict)
    keys: set[PodKey] = field(default_factory=set)
    every_pod: bool = False

    def see(self, changes: Iterable[Touched]) -> bool:
        """Whether any of `changes` (Cluster.update's) changes what was read: a pod read by
        key; a pod that a selector of its namespace matched before the change and not after,
        or after and not before; one it matched both times with other addresses (what a
        selector's pods give the compiler is their addresses; their named ports only through
        a walk of every pod)."""
        if self.every_pod:
            return True
        for key, before, after in changes:
            if key in self.keys:
                return True
            for selector in self.selectors.get(key.namespace, ()):
                was = before is not None and selector.matches(before.labels)
                now = after is not None and selector.matches(after.labels)
                if was != now:
                    return True
                if was and before is not None and after is not None and before.ips != after.ips:
                    return True
        return False


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
        # the compiler's checked policies (given, sctp, by namespace, warnings): see
        # policy.compiler._checked; kept while the same policy objects are given
        self.checked: tuple[tuple[NetworkPolicy, ...], bool, dict[str, list[NetworkPolicy]],
                            frozenset[str]] | None = None
        self.reads = Reads()  # what the reads since `reading()` depended on
        seen: set[PodKey] = set()
        for pod in pods:
            if pod.key in seen:
                raise PolicyError("pods", str(pod.key), "two Pods of one namespace and name")
            seen.add(pod.key)
            self._add(pod, index=False)
        self._points.sort()

    # --- changes --------------------------------------------------------------------------

    def reading(self) -> Reads:
        """Starts recording what the reads depend on, in the `Reads` returned."""
        self.reads = Reads()
        return self.reads

    def update(self, changed: Iterable[Pod], removed: Iterable[PodKey]) -> list[Touched] | None:
        """Pods added or changed (a pod of a key already indexed replaces it) and removed.
        Returns each change as (key, pod before, pod after; None: absent), or None when the
        set of namespaces changed (a namespace selector may match others: every read may
        differ). Host-network pods, which the index leaves out, count as absent."""
        namespaces_before = set(self.ns_labels)
        touched: set[str] = set()
        changes: list[Touched] = []
        for key in removed:
            if key in self._pods:
                touched.add(key.namespace)
                changes.append((key, self._pods[key], None))
                self._remove(key)
        for pod in changed:
            touched.add(pod.namespace)
            before = self._pods.get(pod.key)
            if before is not None:
                self._remove(pod.key)
            self._add(pod, index=True)
            changes.append((pod.key, before, None if pod.host_network else pod))
        for ns in list(self.ns_labels):  # a namespace known only from its pods, now empty
            if ns not in self._declared and not self._groups.get(ns):
                del self.ns_labels[ns]
                self._groups.pop(ns, None)
        spaces_changed = set(self.ns_labels) != namespaces_before
        if spaces_changed:
            self._namespaces.clear()  # a namespace selector may match another set now
            self._sets = {k: s for k, s in self._sets.items() if k not in self._chosen}
        for ns in touched:
            self._selected.pop(ns, None)
            self._addresses.pop(ns, None)
            for name in self._sets_in.pop(ns, ()):
                self._sets.pop(name, None)
        return None if spaces_changed else changes

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
        self.reads.every_pod = True
        if node is None:
            return self.pods
        return [self._pods[k] for k in sorted(self._by_node.get(node, ()))]

    def get(self, key: PodKey) -> Pod | None:
        self.reads.keys.add(key)
        return self._pods.get(key)

    def pods_within(self, within: AddressSet) -> Iterator[tuple[Pod, IPAddress]]:
        """Every (pod, address) with the address in `within`, by address."""
        self.reads.every_pod = True
        for first, last in within:
            i = bisect.bisect_left(self._points, (first,))
            while i < len(self._points) and self._points[i][0] <= last:
                _, key, ip = self._points[i]
                yield self._pods[key], ip
                i += 1

    def select(self, namespace: str, selector: LabelSelector) -> list[Pod]:
        """The pods of `namespace` that `selector` matches."""
        self.reads.selectors.setdefault(namespace, set()).add(selector)
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
        self.reads.selectors.setdefault(namespace, set()).add(selector)
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
        spaces = [policy_namespace] if peer.namespace_selector is None \
            else self.namespaces(peer.namespace_selector)
        for ns in spaces:
            self.reads.selectors.setdefault(ns, set()).add(pods)
        found = self._sets.get(name)
        if found is None:
            if peer.namespace_selector is not None:
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

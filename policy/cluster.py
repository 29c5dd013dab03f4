"""The compiler's index of one snapshot: pods by namespace and label set, namespace labels, named
container ports; selectors evaluated once per distinct label set and memoized.

Pods that share a label set (the replicas of a Deployment) are matched once, which keeps a
thousand policies over thousands of pods cheap. Host-network pods are left out: NetworkPolicy
neither selects them nor sees them as peers (their traffic carries the node's address, which is
exempt anyway). A namespace with pods but no Namespace object (the snapshot may be mid-update)
has the one label the API server would give it, `kubernetes.io/metadata.name`.
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
    Peer,
    Pod,
    PolicyError,
)
from policy.rules import PeerSet

_LabelKey = frozenset[tuple[str, str]]


class Cluster:
    def __init__(self, pods: Iterable[Pod], namespaces: Iterable[Namespace]) -> None:
        self.ns_labels: dict[str, Mapping[str, str]] = {}
        for ns in namespaces:
            if ns.name in self.ns_labels:
                raise PolicyError("namespaces", ns.name, "two Namespaces of one name")
            self.ns_labels[ns.name] = ns.labels
        seen: set[tuple[str, str]] = set()
        self.pods: list[Pod] = []
        for pod in pods:
            if pod.key in seen:
                raise PolicyError("pods", str(pod.key), "two Pods of one namespace and name")
            seen.add(pod.key)
            if not pod.host_network:
                self.pods.append(pod)
        self.pods.sort(key=lambda p: p.key)
        # namespace -> label set -> (the labels, its pods)
        self._groups: dict[str, dict[_LabelKey, tuple[Mapping[str, str], list[Pod]]]] = {}
        # every pod address on the number line, for "which pods lie in these addresses"
        self._points: list[tuple[int, int, IPAddress]] = []  # (point, pod index, address)
        for pod in self.pods:
            if pod.namespace not in self.ns_labels:
                self.ns_labels[pod.namespace] = Namespace(pod.namespace).labels
            groups = self._groups.setdefault(pod.namespace, {})
            groups.setdefault(frozenset(pod.labels.items()), (pod.labels, []))[1].append(pod)
        for index, pod in enumerate(self.pods):
            self._points += [(addresses.point(ip), index, ip) for ip in pod.ips]
        self._points.sort()
        self._selected: dict[tuple[str, LabelSelector], list[Pod]] = {}
        self._namespaces: dict[LabelSelector, list[str]] = {}
        self._addresses: dict[tuple[str, LabelSelector], AddressSet] = {}
        self._sets: dict[str, PeerSet] = {}

    def pods_within(self, within: AddressSet) -> Iterator[tuple[Pod, IPAddress]]:
        """Every (pod, address) with the address in `within`, by address."""
        for first, last in within:
            i = bisect.bisect_left(self._points, (first, -1))
            while i < len(self._points) and self._points[i][0] <= last:
                _, index, ip = self._points[i]
                yield self.pods[index], ip
                i += 1

    def select(self, namespace: str, selector: LabelSelector) -> list[Pod]:
        """The pods of `namespace` that `selector` matches."""
        key = (namespace, selector)
        found = self._selected.get(key)
        if found is None:
            found = [pod for labels, pods in self._groups.get(namespace, {}).values()
                     if selector.matches(labels) for pod in pods]
            self._selected[key] = found
        return found

    def namespaces(self, selector: LabelSelector) -> list[str]:
        found = self._namespaces.get(selector)
        if found is None:
            found = sorted(n for n, labels in self.ns_labels.items() if selector.matches(labels))
            self._namespaces[selector] = found
        return found

    def _addresses_of(self, namespace: str, selector: LabelSelector) -> AddressSet:
        key = (namespace, selector)
        found = self._addresses.get(key)
        if found is None:
            found = addresses.of_addresses(ip for pod in self.select(namespace, selector)
                                           for ip in pod.ips)
            self._addresses[key] = found
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
            spaces = [policy_namespace] if peer.namespace_selector is None \
                else self.namespaces(peer.namespace_selector)
            members = sorted((ip for ns in spaces for pod in self.select(ns, pods)
                              for ip in pod.ips), key=addresses.point)
            found = self._sets[name] = PeerSet(name, tuple(members))
        return found


def selector_text(selector: LabelSelector) -> str:
    """A selector as text that is the same for equal selectors in every process (frozensets
    iterate in an order that varies with the process's string hashing)."""
    terms = sorted([r.key, r.operator, sorted(r.values)] for r in selector.match_expressions)
    return json.dumps([sorted(selector.match_labels), terms], separators=(",", ":"))

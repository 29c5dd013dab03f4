"""The policy compiler: pods x namespaces x NetworkPolicies -> per-pod ingress and egress rules.

    compile_policies(pods, namespaces, policies, sctp=..., node_addresses=..., node=...)
        -> Compiled(pods={PodKey: PodPolicy}, warnings)

Steps:
1. Index the snapshot (policy.cluster): pods by namespace and label set, namespace labels.
2. Per policy and direction it affects: the pods it selects, and per rule one `_Part`: the
   peers' addresses (selectors -> the IPs of the pods they match; ipBlock -> its CIDR less its
   excepts; no peers -> every address) and its ports split into numeric ranges and names.
3. Per pod and direction: isolated iff some policy of that direction selects it; its raw rules
   are its policies' parts with named ports resolved (ingress: against the pod itself; egress:
   against each destination pod, so a part splits into one raw rule per peer pod that has the
   port), then made canonical (policy.rules.canonical), memoized on what they were made of;
   and the same in shared form (policy.rules.canonical_shared): selector peers as PeerSets,
   one per distinct selector (policy.cluster.peer_set), ipBlocks as addresses.

Named ports on egress go to pod addresses only: an address no pod holds has no named ports.
An SCTP port entry, when the renderer says it cannot express SCTP (`sctp=False`), matches
nothing and is reported in `warnings`; the rest of its rule stands. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from policy import addresses
from policy.addresses import AddressSet
from policy.cluster import Cluster
from policy.model import (
    DIRECTIONS,
    Direction,
    IPAddress,
    IPNetwork,
    Namespace,
    NetworkPolicy,
    Pod,
    PodKey,
    PolicyError,
    PolicyRule,
    Protocol,
)
from policy.rules import (
    ANY_PORT,
    OPEN,
    Compiled,
    DirectionRules,
    PeerSet,
    PodPolicy,
    PortRange,
    PortSet,
    RawRule,
    RawSetRule,
    Rule,
    SetRule,
    canonical,
    canonical_shared,
    normalize_ports,
    union_ports,
)

_Named = tuple[tuple[str, Protocol], ...]
_Targets = tuple[tuple[AddressSet, PortSet], ...]


@dataclass(frozen=True, eq=False)
class _Part:
    """One rule of one policy, as far as it does not depend on the selected pod."""

    policy: str
    peers: AddressSet
    numeric: PortSet  # None: all traffic; (): no numeric entry (named ones only, or none left)
    named: _Named
    targets: _Targets  # egress + named: per peer pod, its addresses among the peers, its ports
    sets: frozenset[PeerSet]  # the peers again, shared: the selector peers' sets ...
    static: AddressSet  # ... and the rest (ipBlocks; every address when there are no peers)

    def raw(self, pod: Pod | None) -> list[RawRule]:
        """Raw rules; `pod` (ingress) is the destination that resolves named ports."""
        if pod is None:
            out = [(self.peers, self.numeric, self.policy)]
            return out + [(peers, ports, self.policy) for peers, ports in self.targets]
        return [(self.peers, union_ports((self.numeric, _resolve(self.named, pod))),
                 self.policy)]

    def raw_shared(self, pod: Pod | None) -> list[RawSetRule]:
        """`raw` in shared form; the egress named-port targets stay addresses (per pod)."""
        if pod is None:
            out = [(self.sets, self.static, self.numeric, self.policy)]
            return out + [(frozenset(), peers, ports, self.policy)
                          for peers, ports in self.targets]
        return [(self.sets, self.static,
                 union_ports((self.numeric, _resolve(self.named, pod))), self.policy)]


def _resolve(named: _Named, pod: Pod) -> tuple[PortRange, ...]:
    return normalize_ports(PortRange(cp.protocol, cp.port, cp.port) for cp in pod.ports
                           if (cp.name, cp.protocol) in named)


class _Compiler:
    def __init__(self, cluster: Cluster, sctp: bool) -> None:
        self.cluster = cluster
        self.sctp = sctp
        self.warnings: set[str] = set()
        self._networks: dict[AddressSet, tuple[IPNetwork, ...]] = {}
        self._memo: dict[tuple[Direction, frozenset[object]], DirectionRules] = {}
        self._targets_memo: dict[tuple[AddressSet, _Named], _Targets] = {}

    def networks(self, peers: AddressSet) -> tuple[IPNetwork, ...]:
        found = self._networks.get(peers)
        if found is None:
            found = self._networks[peers] = addresses.networks(peers)
        return found

    def ports(self, policy: NetworkPolicy, direction: Direction, index: int,
              rule: PolicyRule) -> tuple[PortSet, _Named]:
        """The rule's numeric port ranges and its (name, protocol) pairs, SCTP ones left out
        (and warned about) when the renderer cannot express SCTP."""
        where = f"NetworkPolicy {policy.key}: spec.{direction.lower()}[{index}]"
        if not rule.ports:
            return None, ()
        numeric: list[PortRange] = []
        named: set[tuple[str, Protocol]] = set()
        for j, port in enumerate(rule.ports):
            if port.protocol == "SCTP" and not self.sctp:
                self.warnings.add(f"{where}.ports[{j}]: SCTP cannot be expressed by this "
                                  "dataplane; the entry matches nothing")
            elif isinstance(port.port, str):
                named.add((port.port, port.protocol))
            elif port.port is None:
                numeric.append(PortRange(port.protocol, *ANY_PORT))
            else:
                numeric.append(PortRange(port.protocol, port.port, port.end_port or port.port))
        return normalize_ports(numeric), tuple(sorted(named))

    def notes(self, policy: NetworkPolicy) -> frozenset[str]:
        """What compiling `policy` warns about, whatever it selects: rules of a direction its
        policyTypes leaves out, SCTP entries the renderer cannot express. Memoized in the
        index per policy object (the cache keeps an unchanged policy's object)."""
        memo = self.cluster.notes
        found = memo.get((id(policy), self.sctp))
        if found is not None and found[0] is policy:
            return found[1]
        saved, self.warnings = self.warnings, set()
        for direction in DIRECTIONS:
            rules = policy.rules(direction)
            if not policy.affects(direction):
                if rules:
                    self.warnings.add(f"NetworkPolicy {policy.key}: spec.{direction.lower()}"
                                      f" is ignored: policyTypes has no {direction}")
                continue
            for i, rule in enumerate(rules):
                self.ports(policy, direction, i, rule)
        found = (policy, frozenset(self.warnings))
        self.warnings = saved
        if len(memo) > 100_000:  # policies replaced many times over: start again
            memo.clear()
        memo[(id(policy), self.sctp)] = found
        return found[1]

    def _targets(self, peers: AddressSet, named: _Named) -> _Targets:
        """Egress to named ports: per peer pod holding one of them, its addresses among the
        peers and the port numbers the names have on it."""
        key = (peers, named)
        found = self._targets_memo.get(key)
        if found is not None:
            return found
        per_pod: dict[int, tuple[tuple[PortRange, ...], list[IPAddress]]] = {}
        for pod, ip in self.cluster.pods_within(peers):
            entry = per_pod.get(id(pod))
            if entry is None:
                entry = per_pod[id(pod)] = (_resolve(named, pod), [])
            entry[1].append(ip)
        found = tuple((addresses.of_addresses(ips), ports) for ports, ips in per_pod.values()
                      if ports)
        self._targets_memo[key] = found
        return found

    def part(self, policy: NetworkPolicy, direction: Direction, index: int,
             rule: PolicyRule) -> _Part:
        peers = addresses.EVERY_ADDRESS if not rule.peers else addresses.union(
            self.cluster.peer_addresses(policy.namespace, peer) for peer in rule.peers)
        numeric, named = self.ports(policy, direction, index, rule)
        targets = self._targets(peers, named) if direction == "Egress" and named else ()
        sets: set[PeerSet] = set()
        static: list[AddressSet] = [] if rule.peers else [addresses.EVERY_ADDRESS]
        for peer in rule.peers:
            found = self.cluster.peer_set(policy.namespace, peer)
            if found is None:
                static.append(self.cluster.peer_addresses(policy.namespace, peer))
            else:
                sets.add(found)
        return _Part(policy.key, peers, numeric, named, targets, frozenset(sets),
                     addresses.union(static))

    def rules(self, direction: Direction, pod: Pod, parts: list[_Part]) -> DirectionRules:
        """An isolated direction's rules, in both forms."""
        ingress = direction == "Ingress"
        # what the result depends on: the parts, and for ingress the pod's resolved names
        key = frozenset((id(p), _resolve(p.named, pod) if ingress and p.named else None)
                        for p in parts)
        found = self._memo.get((direction, key))
        if found is None:
            resolver = pod if ingress else None
            rules: tuple[Rule, ...] = canonical(
                [r for p in parts for r in p.raw(resolver)], self.networks)
            shared: tuple[SetRule, ...] = canonical_shared(
                [r for p in parts for r in p.raw_shared(resolver)], self.networks)
            found = self._memo[(direction, key)] = DirectionRules(True, rules, shared)
        return found


def _selections(compiler: _Compiler, policies: Iterable[NetworkPolicy],
                mine: list[Pod]) -> dict[tuple[PodKey, Direction], list[_Part]]:
    """(pod, direction) -> the parts of every policy of that direction selecting the pod, for
    the pods `mine`; only the policies of the namespaces of `mine` are looked at (a
    podSelector selects in its own namespace), each selector matched against their label sets
    only; every policy's warnings are gathered. The policies' order, name check and warnings
    are memoized in the index for the same policy objects (`_checked`): an ADD's compile, of
    one pod, does not walk a cluster's thousands of policies."""
    groups: dict[str, dict[frozenset[tuple[str, str]], tuple[Pod, list[PodKey]]]] = {}
    for pod in mine:
        group = groups.setdefault(pod.namespace, {}).setdefault(
            frozenset(pod.labels.items()), (pod, []))
        group[1].append(pod.key)
    by_namespace, warnings = _checked(compiler, policies)
    compiler.warnings |= warnings
    out: dict[tuple[PodKey, Direction], list[_Part]] = {}
    for namespace in sorted(groups):
        for policy in by_namespace.get(namespace, ()):
            selected = [key for first, keys in groups[namespace].values()
                        if policy.pod_selector.matches(first.labels) for key in keys]
            if not selected:
                continue
            for direction in DIRECTIONS:
                if policy.affects(direction):
                    parts = [compiler.part(policy, direction, i, r)
                             for i, r in enumerate(policy.rules(direction))]
                    for key in selected:
                        out.setdefault((key, direction), []).extend(parts)
    return out


def _checked(compiler: _Compiler, policies: Iterable[NetworkPolicy]
             ) -> tuple[dict[str, list[NetworkPolicy]], frozenset[str]]:
    """The policies by namespace (each in name order), checked for two of one name, and every
    policy's warnings; memoized in the index while the policies are the same objects."""
    given = tuple(policies)
    memo = compiler.cluster.checked
    if memo is not None and len(memo[0]) == len(given) and \
            all(a is b for a, b in zip(memo[0], given, strict=True)) and memo[1] == compiler.sctp:
        return memo[2], memo[3]
    by_namespace: dict[str, list[NetworkPolicy]] = {}
    warnings: set[str] = set()
    seen: set[str] = set()
    for policy in sorted(given, key=lambda p: p.key):
        if policy.key in seen:
            raise PolicyError("policies", policy.key, "two NetworkPolicies of one name")
        seen.add(policy.key)
        warnings |= compiler.notes(policy)
        by_namespace.setdefault(policy.namespace, []).append(policy)
    compiler.cluster.checked = (given, compiler.sctp, by_namespace, frozenset(warnings))
    return by_namespace, frozenset(warnings)


def compile_policies(pods: Iterable[Pod], namespaces: Iterable[Namespace],
                     policies: Iterable[NetworkPolicy], *, sctp: bool,
                     node_addresses: Mapping[str, Iterable[IPAddress]] | None = None,
                     node: str | None = None,
                     only: Collection[PodKey] | None = None) -> Compiled:
    """Every (non-host-network) pod's rule sets, or only those of `node`'s pods, or only those
    of the pods `only` names (an ADD's one pod); peers are resolved against all pods either
    way. `sctp`: whether the renderer can express SCTP ports.
    `node_addresses`: node name -> its addresses, exempt from its pods' policies.
    PolicyError: two pods, namespaces or policies of one name."""
    return compile_cluster(Cluster(pods, namespaces), policies, sctp=sctp,
                           node_addresses=node_addresses, node=node, only=only)


def compile_cluster(cluster: Cluster, policies: Iterable[NetworkPolicy], *, sctp: bool,
                    node_addresses: Mapping[str, Iterable[IPAddress]] | None = None,
                    node: str | None = None,
                    only: Collection[PodKey] | None = None) -> Compiled:
    """`compile_policies` over an index kept between compilations (`Cluster.update`): what an
    event changed is looked at again, the rest comes from the index's memos."""
    compiler = _Compiler(cluster, sctp)
    if only is not None:
        mine = sorted((p for k in only if (p := cluster.get(k)) is not None
                       and (node is None or p.node == node)), key=lambda p: p.key)
    else:
        mine = cluster.on_node(node)
    selections = _selections(compiler, policies, mine)
    nodes = node_addresses or {}
    out: dict[PodKey, PodPolicy] = {}
    for pod in mine:
        directions: list[DirectionRules] = []
        for direction in DIRECTIONS:
            parts = selections.get((pod.key, direction))
            directions.append(OPEN if parts is None else compiler.rules(direction, pod, parts))
        exempt = sorted(set(nodes.get(pod.node, ())), key=addresses.point)
        out[pod.key] = PodPolicy(pod.key, tuple(exempt), directions[0], directions[1])
    return Compiled(out, tuple(sorted(compiler.warnings)))

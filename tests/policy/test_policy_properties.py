"""The compiler against the spec, on random small clusters (tests/policy/strategies.py).

Test plan:
- equivalence: for every pod, both directions, every probed connection (every pod, node and CIDR
  edge address x TCP/UDP/SCTP on ports around the pools' numbers, and ICMP), what the compiled
  rules allow is what the independent reference (tests/policy/reference.py) says the spec allows;
  with the renderer's SCTP capability on and off; the rules' shared form (selector peers as
  named sets) allows the same;
- an index kept between compilations (Cluster.update with pods removed, relabelled, readdressed
  and added, namespaces appearing and emptying) compiles exactly as a fresh one, for every
  node and for the whole cluster, before and after its memos were filled;
- shared sets: one set per distinct selector, named by the selector alone: its members are
  exactly the addresses of the pods it matches, and adding a pod to the cluster changes the
  members of sets and never the shape of any pod's shared rules;
- isolation is exactly "selected by a policy of that direction", per pod and direction;
- additivity: one more policy never takes away a connection of a pod already isolated in that
  direction (policies only add allows);
- SCTP never widens: without SCTP, TCP/UDP/ICMP verdicts do not change and SCTP ones only
  narrow; the SCTP warnings name exactly the SCTP entries of the directions in force;
- canonical form: permuting pods, namespaces, policies, rules, peers and ports gives an identical
  result; compiling one node's pods gives those pods' entries of the full compilation and the
  same warnings; the rules themselves are in canonical shape (sorted disjoint CIDRs, merged port
  ranges, no two rules with equal ports or equal peers, none inside another, ports never the
  empty tuple).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import random
from itertools import pairwise
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policy import (
    Compiled,
    DirectionRules,
    Pod,
    PodKey,
    compile_policies,
    namespace_from_k8s,
    pod_from_k8s,
)
from policy import policy_from_k8s as parse_policy
from policy.cluster import Cluster
from policy.compiler import compile_cluster
from policy.rules import Rule, ports_subset, shared_shape
from tests.policy.reference import Conn, Reference, compiled_allows, shared_allows
from tests.policy.strategies import (
    NODES,
    POD_LABELS,
    ClusterSpec,
    clusters,
    label_sets,
    pods,
    strictly_inside,
)

SLOW = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DIRECTIONS = ("Ingress", "Egress")


def _compile(spec: ClusterSpec, policies: list[Any] | None = None, sctp: bool | None = None,
             node: str | None = None, only: set[PodKey] | None = None) -> Compiled:
    return compile_policies([pod_from_k8s(p) for p in spec.pods],
                            [namespace_from_k8s(n) for n in spec.namespaces],
                            [parse_policy(p) for p in (spec.policies if policies is None
                                                       else policies)],
                            sctp=spec.sctp if sctp is None else sctp,
                            node_addresses=NODES, node=node, only=only)


def _verdicts(spec: ClusterSpec, compiled: Compiled) -> dict[tuple[str, str, Conn], bool]:
    out = {}
    conns = spec.conns()
    for raw in spec.pods:
        pod = pod_from_k8s(raw)
        if pod.host_network:
            continue
        for direction in DIRECTIONS:
            for conn in conns:
                out[(pod.name, direction, conn)] = compiled_allows(
                    compiled.pods[pod.key], direction, conn, pod.ips)
    return out


@SLOW
@given(clusters())
def test_compiled_rules_allow_exactly_what_the_spec_allows(spec: ClusterSpec) -> None:
    compiled = _compile(spec)
    reference = Reference(spec.pods, spec.namespaces, spec.policies, NODES, spec.sctp)
    verdicts = _verdicts(spec, compiled)
    conns = spec.conns()
    for raw in spec.pods:
        if raw["spec"]["hostNetwork"]:
            assert pod_from_k8s(raw).key not in compiled.pods  # outside NetworkPolicy
            continue
        pod = pod_from_k8s(raw)
        for direction in DIRECTIONS:
            rules = compiled.pods[pod.key].ingress if direction == "Ingress" \
                else compiled.pods[pod.key].egress
            assert rules.isolated == bool(reference.governing(raw, direction)), direction
            for conn in conns:
                expected = reference.allows(raw, direction, conn)
                assert verdicts[(pod.name, direction, conn)] == expected, \
                    (pod.key, direction, conn, expected, rules)
                assert shared_allows(compiled.pods[pod.key], direction, conn, pod.ips) \
                    == expected, (pod.key, direction, conn, expected, rules.shared)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_one_more_policy_never_takes_a_connection_from_an_isolated_pod(spec: ClusterSpec) -> None:
    before = _compile(spec)
    after = _compile(spec, [*spec.policies, spec.extra])
    was, now = _verdicts(spec, before), _verdicts(spec, after)
    for (name, direction, conn), allowed in was.items():
        key = next(pod_from_k8s(p).key for p in spec.pods if p["metadata"]["name"] == name)
        rules = before.pods[key].ingress if direction == "Ingress" else before.pods[key].egress
        if rules.isolated and allowed:
            assert now[(name, direction, conn)], (key, direction, conn)


def _sctp_entries(spec: ClusterSpec) -> set[str]:
    found = set()
    for policy in spec.policies:
        key = f"{policy['metadata']['namespace']}/{policy['metadata']['name']}"
        in_force = Reference.types(policy)
        for direction in DIRECTIONS:
            if direction not in in_force:
                continue
            for i, rule in enumerate(policy["spec"].get(direction.lower()) or ()):
                for j, entry in enumerate(rule.get("ports") or ()):
                    if entry.get("protocol") == "SCTP":
                        found.add(f"NetworkPolicy {key}: spec.{direction.lower()}[{i}]"
                                  f".ports[{j}]")
    return found


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_without_sctp_an_sctp_entry_matches_nothing_and_widens_nothing(spec: ClusterSpec) -> None:
    with_sctp = _verdicts(spec, _compile(spec, sctp=True))
    without = _compile(spec, sctp=False)
    for (name, direction, conn), allowed in _verdicts(spec, without).items():
        if conn.protocol == "SCTP":
            assert not allowed or with_sctp[(name, direction, conn)], (name, direction, conn)
        else:
            assert allowed == with_sctp[(name, direction, conn)], (name, direction, conn)
    warned = {w.split(": SCTP")[0] for w in without.warnings if ": SCTP" in w}
    assert warned == _sctp_entries(spec)
    assert not any(": SCTP" in w for w in _compile(spec, sctp=True).warnings)


def _shuffled(value: Any, rng: random.Random) -> Any:
    """The same Kubernetes objects with every list in another order (policyTypes too)."""
    if isinstance(value, dict):
        return {k: _shuffled(v, rng) for k, v in value.items()}
    if isinstance(value, list):
        items = [_shuffled(v, rng) for v in value]
        rng.shuffle(items)
        return items
    return value


def _check_canonical_shape(rules: tuple[Rule, ...]) -> None:
    for rule in rules:
        assert rule.ports is None or rule.ports, rule
        assert rule.policies and list(rule.policies) == sorted(set(rule.policies))
        keys = [(n.version, int(n.network_address), n.prefixlen) for n in rule.peers]
        assert keys == sorted(keys)
        for x, y in pairwise(rule.peers):
            if x.version == y.version:  # disjoint, and no two that one CIDR covers
                assert int(x.broadcast_address) < int(y.network_address)
                assert x.supernet() != y.supernet() or x.prefixlen != y.prefixlen
        if rule.ports is not None:
            for p, q in pairwise(rule.ports):
                assert (p.protocol, p.last + 1) < (q.protocol, q.first)
    for a in rules:
        for b in rules:
            if a is not b:
                assert a.ports != b.ports and a.peers != b.peers
                inside = all(any(n == m or strictly_inside(n, m) for m in b.peers)
                             for n in a.peers)
                assert not (inside and ports_subset(a.ports, b.ports)), (a, b)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.randoms(use_true_random=False))
def test_the_result_is_canonical(spec: ClusterSpec, rng: random.Random) -> None:
    compiled = _compile(spec)
    again = ClusterSpec(_shuffled(spec.namespaces, rng), _shuffled(spec.pods, rng),
                        _shuffled(spec.policies, rng), spec.sctp)
    shuffled = _compile(again)
    assert shuffled.pods == compiled.pods
    assert len(shuffled.warnings) == len(compiled.warnings)  # they name list indexes
    for node in NODES:
        mine = _compile(spec, node=node)
        assert mine.pods == {k: v for k, v in compiled.pods.items()
                             if _pod(spec, k.name).node == node}
        assert mine.warnings == compiled.warnings
    for one in list(compiled.pods)[:3]:  # an ADD compiles its one pod: the same rules
        assert _compile(spec, only={one}).pods == {one: compiled.pods[one]}
    for pod in compiled.pods.values():
        assert pod.node_addresses == tuple(NODES[_pod(spec, pod.pod.name).node])
        for rules in (pod.ingress, pod.egress):
            assert rules.isolated or not rules.rules
            _check_canonical_shape(rules.rules)


def _pod(spec: ClusterSpec, name: str) -> Pod:
    return next(pod_from_k8s(p) for p in spec.pods if p["metadata"]["name"] == name)


def test_probed_addresses_cover_every_pool() -> None:
    spec = ClusterSpec([], [], [], True)
    remotes = set(spec.remotes())
    assert ipaddress.ip_address("10.0.0.7") in remotes  # 10.0.0.0/29's broadcast
    assert ipaddress.ip_address("10.0.0.8") in remotes  # just past it
    assert ipaddress.ip_address("fd00::8") in remotes


def _shape(rules: DirectionRules) -> object:
    """A direction's shared rules without the sets' members."""
    assert rules.shared is not None or not rules.isolated
    return shared_shape(rules)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.data())
def test_a_new_pod_changes_set_members_never_a_rules_shape(spec: ClusterSpec,
                                                           data: st.DataObject) -> None:
    new = data.draw(pods(len(spec.pods)))
    new["spec"]["containers"][0]["ports"] = []  # named ports are per pod: egress splits on them
    before = _compile(spec)
    after = _compile(ClusterSpec(spec.namespaces, [*spec.pods, new], spec.policies, spec.sctp))
    members: dict[str, set[ipaddress.IPv4Address | ipaddress.IPv6Address]] = {}
    for key, pod in before.pods.items():
        for direction in ("ingress", "egress"):
            rules = getattr(pod, direction)
            assert _shape(rules) == _shape(getattr(after.pods[key], direction)), direction
            for rule in rules.shared or ():
                for peer_set in rule.sets:
                    members.setdefault(peer_set.name, set(peer_set.members))
    # one set per selector: every rule naming it holds the same members
    for pod in after.pods.values():
        for rules in (pod.ingress, pod.egress):
            for rule in rules.shared or ():
                for peer_set in rule.sets:
                    assert list(peer_set.members) == sorted(peer_set.members,
                                                            key=lambda a: (a.version, int(a)))
                    if peer_set.name not in members:
                        continue  # named by no rule before (its policy selected no pod)
                    had = members[peer_set.name]
                    assert had <= set(peer_set.members)
                    assert set(peer_set.members) - had <= {ipaddress.ip_address(e["ip"])
                                     for e in new["status"]["podIPs"]}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.data())
def test_an_index_kept_between_compiles_compiles_as_a_fresh_one(spec: ClusterSpec,
                                                                 data: st.DataObject) -> None:
    namespaces = [namespace_from_k8s(n) for n in spec.namespaces]
    policies = [parse_policy(p) for p in spec.policies]
    before = [pod_from_k8s(p) for p in spec.pods]
    index = Cluster(before, namespaces)
    for node in (*NODES, None):  # fill the memos the update must forget
        compile_cluster(index, policies, sctp=spec.sctp, node_addresses=NODES, node=node)
    removed = {p.key for p in before if data.draw(st.booleans(), "removed")}
    changed = []
    for pod in before:
        if pod.key not in removed and data.draw(st.booleans(), "changed"):
            labels = data.draw(label_sets(POD_LABELS), "labels")
            ips = data.draw(st.sampled_from([pod.ips, (), pod.ips[:1]]), "ips")
            changed.append(dataclasses.replace(pod, labels=labels, ips=ips))
    added = [dataclasses.replace(pod_from_k8s(data.draw(pods(len(before) + i), "added")),
                                 name=f"added-{i}")
             for i in range(data.draw(st.integers(0, 3), "n_added"))]
    index.update([*changed, *added], removed)
    new = {p.key: p for p in before if p.key not in removed} | \
        {p.key: p for p in [*changed, *added]}
    for node in (*NODES, None):
        fresh = compile_policies(new.values(), namespaces, policies, sctp=spec.sctp,
                                 node_addresses=NODES, node=node)
        kept = compile_cluster(index, policies, sctp=spec.sctp, node_addresses=NODES, node=node)
        assert kept == fresh, node

"""The compiler's index kept between compiles (agent/netpol/index.py), fed by a pod journal.

Test plan:
- over random histories of a small cluster (pods relabelled, readdressed, added, deleted; this
  node's own pods laid over the cache and changed or dropped; relists that hand over the whole
  cache; a Namespace relabelled), every compile through the kept index equals a fresh
  compilation of the same pods, namespaces and policies, for the whole cluster and for one
  node's pods;
- it rebuilds only for the first compile, a relist and a Namespace change, and otherwise asks
  the journal for what changed since its last token (never the whole cache);
- a compile's result is kept: the next compile of the same pods under the same policies gives
  the same object while the pods that changed are none its selectors matched, before or after
  (namespace `c`, which no policy names, is in the random histories too), or pods they matched
  both times at the same addresses (a relabel the selectors do not see); a pod joining or
  leaving a selector's pods, a matched pod readdressed, a policy, the node's own pods or its
  addresses compile again.
"""

from __future__ import annotations

import random
from ipaddress import ip_address

from agent.infra.listwatch import Changes
from agent.netpol.index import KeptIndex
from policy import (
    Compiled,
    Namespace,
    Pod,
    PodKey,
    compile_policies,
    pod_from_k8s,
    policy_from_k8s,
)
from policy.model import IPAddress
from tests.policy.build import pod, policy

NAMESPACES = ("a", "b", "c")  # c: no policy reads its pods
APPS = ("web", "db", "api")
POLICIES = [policy_from_k8s(p) for p in (
    policy("a", "db-from-web", podSelector={"matchLabels": {"app": "db"}},
           ingress=[{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}]),
    policy("b", "api-from-team", podSelector={"matchLabels": {"app": "api"}},
           ingress=[{"from": [{"namespaceSelector": {"matchLabels": {"team": "x"}},
                               "podSelector": {"matchLabels": {"app": "web"}}}]}]),
    policy("a", "web-egress", podSelector={"matchLabels": {"app": "web"}},
           egress=[{"to": [{"podSelector": {"matchLabels": {"app": "db"}}}]}]),
)]


class Journal:
    """A pod cache with the reflector's journal: changed keys since a token, all after a
    relist (a new epoch). Counts what it handed out."""

    def __init__(self) -> None:
        self.pods: dict[PodKey, Pod] = {}
        self.epoch, self.seq = 1, 0
        self.touched: dict[PodKey, int] = {}
        self.fulls = 0

    def set(self, value: Pod) -> None:
        self.pods[value.key] = value
        self._touch(value.key)

    def drop(self, key: PodKey) -> None:
        if self.pods.pop(key, None) is not None:
            self._touch(key)

    def relist(self) -> None:
        self.epoch, self.seq, self.touched = self.epoch + 1, 0, {}

    def _touch(self, key: PodKey) -> None:
        self.seq += 1
        self.touched.pop(key, None)
        self.touched[key] = self.seq

    def __call__(self, since: tuple[int, int] | None) -> Changes[PodKey, Pod]:
        token = (self.epoch, self.seq)
        if since is None or since[0] != self.epoch:
            self.fulls += 1
            return Changes(token, dict(self.pods), {})
        return Changes(token, None, {k: self.pods.get(k) for k, s in self.touched.items()
                                     if s > since[1]})


def _pod(rng: random.Random, i: int, node: str | None = None) -> Pod:
    ns = NAMESPACES[i % 3]
    return pod_from_k8s(pod(ns, f"p{i}", f"10.0.{i // 200}.{i % 200 + 1}",
                            {"app": rng.choice(APPS)}, node=node or rng.choice(("n1", "n2"))))


def _namespaces(team: str) -> dict[str, Namespace]:
    return {"a": Namespace("a", {"kubernetes.io/metadata.name": "a", "team": team}),
            "b": Namespace("b", {"kubernetes.io/metadata.name": "b"})}


def test_the_kept_index_compiles_as_a_fresh_compilation_does() -> None:
    reused = 0
    for seed in range(12):
        rng = random.Random(seed)
        journal, index = Journal(), KeptIndex()
        for i in range(12):
            journal.set(_pod(rng, i))
        local: dict[PodKey, Pod] = {}
        team, next_id = "x", 12
        for _step in range(25):
            op = rng.randrange(8)
            keys = sorted(journal.pods)
            if op == 0 and keys:  # relabelled or readdressed: a new object
                journal.set(_pod(rng, int(rng.choice(keys).name[1:])))
            elif op == 1:
                journal.set(_pod(rng, next_id))
                next_id += 1
            elif op == 2 and keys:
                journal.drop(rng.choice(keys))
            elif op == 3 and keys:  # this node's view of one pod: the records' addresses
                key = rng.choice(keys)
                local[key] = pod_from_k8s(pod(key.namespace, key.name, "10.9.0.1",
                                              {"app": rng.choice(APPS)}, node="n1"))
            elif op == 4 and local:
                del local[rng.choice(sorted(local))]
            elif op == 5:
                journal.relist()
            elif op == 6:
                team = "y" if team == "x" else "x"
            namespaces = _namespaces(team)
            merged = {**journal.pods, **local}
            for only in (None, {k for k, p in merged.items() if p.node == "n1"}):
                got = index.compile(journal, local, namespaces, POLICIES, sctp=True,
                                    node_addresses={}, only=only)
                fresh = compile_policies(merged.values(), namespaces.values(), POLICIES,
                                         sctp=True, node_addresses={}, only=only)
                assert got == fresh, (seed, _step, op)
        assert index.updates > 0 and index.rebuilds <= journal.fulls + 25
        reused += index.reused
    assert reused > 0  # the kept results were taken, and were right (the comparison above)


def test_it_asks_for_the_whole_cache_only_at_the_start_and_after_a_relist() -> None:
    rng = random.Random(1)
    journal, index = Journal(), KeptIndex()
    for i in range(5):
        journal.set(_pod(rng, i))

    def compile_() -> None:
        index.compile(journal, {}, _namespaces("x"), POLICIES, sctp=True, node_addresses={},
                      only=None)
    compile_()
    journal.set(_pod(rng, 1))
    compile_()
    journal.drop(PodKey("c", "p2"))
    compile_()
    assert (journal.fulls, index.rebuilds, index.updates) == (1, 1, 2)
    journal.relist()
    compile_()
    assert (journal.fulls, index.rebuilds) == (2, 2)


def test_a_result_is_kept_until_something_it_read_changes() -> None:
    journal, index = Journal(), KeptIndex()

    def made(name: str, app: str, ip: str, ns: str = "a") -> Pod:
        return pod_from_k8s(pod(ns, name, ip, {"app": app}, node="n2"))
    for p in (made("db", "db", "10.0.0.1"), made("web", "web", "10.0.0.2"),
              made("api", "api", "10.0.0.3"), made("other", "web", "10.0.0.4", ns="c")):
        journal.set(p)
    # the node's pod: a db pod of a, whose ingress comes from a's web pods (db-from-web)
    local = {PodKey("a", "mine"): pod_from_k8s(pod("a", "mine", "10.0.1.1", {"app": "db"},
                                                    node="n1"))}
    policies = list(POLICIES)
    nodes: dict[str, list[IPAddress]] = {"n1": [ip_address("192.168.0.1")]}

    def compile_() -> Compiled:
        return index.compile(journal, local, _namespaces("x"), policies, sctp=True,
                             node_addresses=nodes, only=set(local))

    first = compile_()
    assert compile_() is first  # nothing changed
    journal.set(made("other", "db", "10.0.0.5", ns="c"))  # c: nothing reads its pods
    journal.set(made("api", "api", "10.0.0.6"))  # of a, and no web pod before or after
    journal.drop(PodKey("a", "db"))
    assert compile_() is first and index.reused == 2
    journal.set(made("api", "web", "10.0.0.3"))  # now one of a's web pods: a peer
    second = compile_()
    assert second is not first
    assert compile_() is second
    journal.set(pod_from_k8s(pod("a", "api", "10.0.0.3", {"app": "web", "version": "v2"},
                                 node="n2")))  # relabelled, still a web pod, same address
    assert compile_() is second
    journal.set(made("api", "web", "10.0.0.9"))  # readdressed
    assert compile_() is not second
    second = compile_()
    journal.set(made("web", "api", "10.0.0.2"))  # no longer a web pod
    assert compile_() is not second
    third = compile_()
    policies = policies[1:]  # a policy deleted
    assert compile_() is not third
    fourth = compile_()
    local = {PodKey("a", "mine"): pod_from_k8s(pod("a", "mine", "10.0.1.2", {"app": "db"},
                                                    node="n1"))}  # the node's pod readdressed
    assert compile_() is not fourth
    fifth = compile_()
    nodes = {"n1": [ip_address("192.168.0.2")]}  # the node's addresses
    assert compile_() is not fifth

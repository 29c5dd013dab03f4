"""The policy controller between the Kubernetes cache, the compiler and the renderers.

Test plan:
- ADD (`admit`): the pod's rules come from the cached policies and the pod's labels, with the
  attachment's own addresses (the API does not know them yet), before the answer; a pod the
  cache lacks comes from the source's GET; a request without a Kubernetes pod is left alone;
- with the cache never listed, an ADD is refused with code 11 (isolation unknown) and the
  background loop applies nothing (the rules in place stay);
- a full apply gives every renderer the whole node: every local attachment, peers from the
  cluster, a changed policy changes the rules, an attachment whose pod left loses them;
- a sandbox replaced: the old attachment's DEL leaves the new one's rules;
- no renderer ever gets another node's pod: other nodes' pods are peers only;
- a pod bound to this node before its ADD is compiled in the full apply and handed over with no
  address (a stand-in attachment), host-network, finished and other nodes' pods not; its ADD then
  hands over the same rules with the attachment's address, and the stand-in goes once the
  record is there;
- `explain` shows the rules in force and the policies each came from; counters add up;
- the compiler's index is kept between compiles: a pod elsewhere that joins, changes or leaves
  updates it (no rebuild) and the rules follow; an ADD between full applies shares it.

The source is an in-memory stand-in for the Kubernetes cache (the API itself is exercised by
tests/kube against a real kube-apiserver); the renderer records what it is given (the real ones
are tested with nftables and VPP in their own tests).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

import pytest

from agent.infra.listwatch import Changes
from agent.model.errors import TryAgainLater
from agent.model.pod import PodKey, PodRecord
from agent.netpol.controller import PolicyController, scheduled_key
from agent.netpol.types import Counts, Enforced
from policy import Namespace, NetworkPolicy, Pod, pod_from_k8s, policy_from_k8s
from policy import PodKey as K8sPod
from tests.policy.build import pod, policy

NODE_IP = ipaddress.ip_address("192.168.16.1")
FROM_WEB = {"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}


class Cache:
    """What agent/kube's KubeState gives, from values set by the test."""

    def __init__(self, synced: bool = True) -> None:
        self.synced = synced
        self.pod_list: list[Pod] = []
        self.policy_list: list[NetworkPolicy] = []
        self.gets: list[tuple[str, str]] = []
        self.api: dict[tuple[str, str], Pod] = {}  # what a GET finds beyond the cache
        self.epoch = 0  # a relist starts another
        self.snapshots: list[dict[K8sPod, Pod]] = []

    def wait_synced(self, timeout: float) -> bool:
        return self.synced

    def pods(self) -> dict[K8sPod, Pod]:
        return {p.key: p for p in self.pod_list}

    def pod_changes(self, since: tuple[int, int] | None) -> Changes[K8sPod, Pod]:
        """A journal as the reflector's: the pods whose object is not the one the snapshot
        `since` names held (the reflector replaces an object that changed); all of them when
        `since` is None or from an earlier epoch (a relist)."""
        now = self.pods()
        self.snapshots.append(now)
        token = (self.epoch, len(self.snapshots) - 1)
        if since is None or since[0] != self.epoch:
            return Changes(token, now, {})
        old = self.snapshots[since[1]]
        changed: dict[K8sPod, Pod | None] = {k: v for k, v in now.items() if old.get(k) is not v}
        changed |= {k: None for k in old if k not in now}
        return Changes(token, None, changed)

    def namespaces(self) -> dict[str, Namespace]:
        return {"a": Namespace("a", {"kubernetes.io/metadata.name": "a"})}

    def policies(self) -> dict[K8sPod, NetworkPolicy]:
        return {K8sPod(p.namespace, p.name): p for p in self.policy_list}

    def pod(self, namespace: str, name: str) -> Pod | None:
        for p in self.pod_list:
            if (p.namespace, p.name) == (namespace, name):
                return p
        self.gets.append((namespace, name))
        return self.api.get((namespace, name))


class Recorder:
    name = "recorder"
    sctp = True

    def __init__(self) -> None:
        self.state: dict[PodKey, Enforced] = {}
        self.calls: list[str] = []

    def apply(self, desired: Mapping[PodKey, Enforced]) -> None:
        self.calls.append("apply")
        self.state = dict(desired)

    def apply_one(self, enforced: Enforced) -> None:
        self.calls.append("apply_one")
        self.state[enforced.attachment] = enforced

    def remove_one(self, key: PodKey) -> None:
        self.calls.append("remove_one")
        self.state.pop(key, None)

    def counters(self) -> Counts:
        return Counts({"a/p": (1, 100)}, {(K8sPod("a", "db"), "ingress"): (2, 200)})


def record(name: str, ip: str, cid: str = "") -> PodRecord:
    return PodRecord(container_id=cid or f"c-{name}", ifname="eth0", netns="/run/netns/x",
                     addresses=[f"{ip}/32"], gateways=[], pod_namespace="a", pod_name=name,
                     state="ready", wiring={"host_ifname": f"h-{name}"})


def controller(cache: Cache, records: list[PodRecord] | None = None,
               *renderers: Any) -> PolicyController:
    return PolicyController(cache, list(renderers) or [Recorder()], "n1", lambda: [NODE_IP],
                            lambda: list(records or []), debounce=0, sync_wait=0)


def test_admit_installs_the_pods_rules_with_its_own_address() -> None:
    cache = Cache()
    cache.pod_list = [pod_from_k8s(pod("a", "db", None, {"app": "db"})),
                      pod_from_k8s(pod("a", "web", "10.0.0.9", {"app": "web"}, node="n2"))]
    cache.policy_list = [policy_from_k8s(policy("a", "p", podSelector={
        "matchLabels": {"app": "db"}}, ingress=[{**FROM_WEB, "ports": [{"port": 5432}]}]))]
    renderer = Recorder()
    ctl = controller(cache, None, renderer)
    ctl.admit(record("db", "10.0.1.5"), {"host_ifname": "h-db", "extra": {"sw_if_index": 7}})
    got = renderer.state[PodKey("c-db", "eth0")]
    assert got.pod == K8sPod("a", "db")
    assert got.addresses == (ipaddress.ip_address("10.0.1.5"),)
    assert got.wiring["extra"] == {"sw_if_index": 7}
    assert got.policy.ingress.isolated and not got.policy.egress.isolated
    (rule,) = got.policy.ingress.rules
    assert [str(n) for n in rule.peers] == ["10.0.0.9/32"]
    assert [str(p) for p in rule.ports or ()] == ["TCP/5432"]
    assert got.policy.node_addresses == (NODE_IP,)


def test_a_pod_the_cache_lacks_comes_from_a_get() -> None:
    cache = Cache()
    cache.api[("a", "db")] = pod_from_k8s(pod("a", "db", None, {"app": "db"}))
    cache.policy_list = [policy_from_k8s(policy("a", "p", podSelector={
        "matchLabels": {"app": "db"}}))]
    renderer = Recorder()
    controller(cache, None, renderer).admit(record("db", "10.0.1.5"))
    assert cache.gets == [("a", "db")]
    assert renderer.state[PodKey("c-db", "eth0")].policy.ingress.isolated  # by its labels


def test_a_request_without_a_pod_is_left_alone() -> None:
    renderer = Recorder()
    bare = record("x", "10.0.1.5")
    bare.pod_namespace = bare.pod_name = ""
    controller(Cache(synced=False), None, renderer).admit(bare)
    assert renderer.calls == []


def test_never_listed_refuses_the_add_and_applies_nothing() -> None:
    renderer = Recorder()
    ctl = controller(Cache(synced=False), [record("db", "10.0.1.5")], renderer)
    with pytest.raises(TryAgainLater, match="isolation of pod a/db cannot be decided"):
        ctl.admit(record("db", "10.0.1.5"))
    with pytest.raises(TryAgainLater, match="has not listed yet"):
        ctl.run_once()
    assert renderer.calls == []


def test_a_full_apply_gives_the_whole_node_and_follows_changes() -> None:
    cache = Cache()
    cache.pod_list = [pod_from_k8s(pod("a", "db", "10.0.1.5", {"app": "db"})),
                      pod_from_k8s(pod("a", "web", "10.0.1.6", {"app": "web"}))]
    records = [record("db", "10.0.1.5"), record("web", "10.0.1.6")]
    renderer = Recorder()
    ctl = controller(cache, records, renderer)
    ctl.run_once()
    assert set(renderer.state) == {PodKey("c-db", "eth0"), PodKey("c-web", "eth0")}
    assert not any(e.isolated for e in renderer.state.values())
    cache.policy_list = [policy_from_k8s(policy("a", "p", podSelector={
        "matchLabels": {"app": "db"}}, ingress=[FROM_WEB]))]
    ctl.changed("NetworkPolicy")
    ctl.run_once()
    db = renderer.state[PodKey("c-db", "eth0")]
    assert [str(n) for n in db.policy.ingress.rules[0].peers] == ["10.0.1.6/32"]
    assert not renderer.state[PodKey("c-web", "eth0")].isolated
    records.pop()  # web's attachment is gone (DEL); the pod is still bound to this node
    ctl.run_once()
    assert set(renderer.state) == {PodKey("c-db", "eth0"), scheduled_key(K8sPod("a", "web"))}
    assert renderer.state[scheduled_key(K8sPod("a", "web"))].addresses == ()
    assert ctl.installed() == 1 and ctl.applies == 3


def test_a_pod_bound_here_gets_its_rules_before_its_add() -> None:
    cache = Cache()
    cache.pod_list = [pod_from_k8s(pod("a", "db", None, {"app": "db"})),
                      pod_from_k8s(pod("a", "host", None, {"app": "db"}, hostNetwork=True)),
                      pod_from_k8s(pod("a", "far", None, {"app": "db"}, node="n2")),
                      pod_from_k8s({**pod("a", "done", None, {"app": "db"}),
                                    "status": {"phase": "Succeeded"}})]
    cache.policy_list = [policy_from_k8s(policy("a", "p", podSelector={
        "matchLabels": {"app": "db"}}, ingress=[FROM_WEB]))]
    records: list[PodRecord] = []
    renderer = Recorder()
    ctl = controller(cache, records, renderer)
    ctl.run_once()
    early = scheduled_key(K8sPod("a", "db"))
    assert set(renderer.state) == {early}
    assert renderer.state[early].addresses == () and renderer.state[early].policy.ingress.isolated
    assert ctl.installed() == 0 and ctl.explain("a", "db") is None  # nothing enforced yet
    # bound later (a watch event, not a relist): the kept index follows
    cache.pod_list = [*cache.pod_list, pod_from_k8s(pod("a", "db2", None, {"app": "db"}))]
    ctl.changed("Pod")
    ctl.run_once()
    assert set(renderer.state) == {early, scheduled_key(K8sPod("a", "db2"))}
    cache.pod_list = cache.pod_list[:-1]
    ctl.changed("Pod")
    ctl.run_once()
    assert set(renderer.state) == {early}
    assert ctl._index.rebuilds == 1  # followed through the journal
    ctl.admit(record("db", "10.0.1.5"))
    added = renderer.state[PodKey("c-db", "eth0")]
    assert added.policy == renderer.state[early].policy
    assert added.addresses == (ipaddress.ip_address("10.0.1.5"),)
    records.append(record("db", "10.0.1.5"))
    ctl.run_once()
    assert set(renderer.state) == {PodKey("c-db", "eth0")}


def test_a_replaced_sandboxs_del_leaves_the_new_ones_rules() -> None:
    cache = Cache()
    cache.policy_list = [policy_from_k8s(policy("a", "deny"))]
    renderer = Recorder()
    ctl = controller(cache, None, renderer)
    ctl.admit(record("db", "10.0.1.5", cid="old"))
    ctl.admit(record("db", "10.0.1.7", cid="new"))
    ctl.release(PodKey("old", "eth0"))
    assert list(renderer.state) == [PodKey("new", "eth0")]
    assert renderer.state[PodKey("new", "eth0")].addresses == (ipaddress.ip_address("10.0.1.7"),)


def test_explain_and_counters() -> None:
    cache = Cache()
    cache.pod_list = [pod_from_k8s(pod("a", "web", "10.0.0.9", {"app": "web"}))]
    cache.policy_list = [policy_from_k8s(policy("a", "p", ingress=[FROM_WEB]))]
    ctl = controller(cache, None, Recorder(), Recorder())
    ctl.admit(record("db", "10.0.1.5"))
    shown = ctl.explain("a", "db")
    assert shown is not None
    (one,) = shown["attachments"]
    assert one["ingress"] == {"isolated": True, "rules": [
        {"peers": ["10.0.0.9/32"], "ports": "all traffic", "policies": ["a/p"]}]}
    assert one["egress"] == {"isolated": False, "rules": []}
    assert ctl.explain("a", "nobody") is None
    assert ctl.counters() == Counts({"a/p": (2, 200)}, {(K8sPod("a", "db"), "ingress"): (4, 400)})


def test_other_nodes_pods_are_peers_only() -> None:
    cache = Cache()
    cache.pod_list = [pod_from_k8s(pod("a", "db", "10.0.2.5", {"app": "db"}, node="n2")),
                      pod_from_k8s(pod("a", "web", "10.0.2.6", {"app": "web"}, node="n2")),
                      pod_from_k8s(pod("a", "mine", "10.0.1.5", {"app": "db"}))]
    cache.policy_list = [policy_from_k8s(policy("a", "p", podSelector={
        "matchLabels": {"app": "db"}}, ingress=[FROM_WEB], egress=[], policyTypes=[
            "Ingress", "Egress"]))]
    renderer = Recorder()
    controller(cache, [record("mine", "10.0.1.5")], renderer).run_once()
    # n2's isolated db is n2's business; web on n2 is a peer of this node's pod
    assert list(renderer.state) == [PodKey("c-mine", "eth0")]
    mine = renderer.state[PodKey("c-mine", "eth0")].policy
    assert [str(n) for n in mine.ingress.rules[0].peers] == ["10.0.2.6/32"]


def test_an_apply_that_changes_nothing_sends_nothing_unless_forced() -> None:
    cache = Cache()
    cache.policy_list = [policy_from_k8s(policy("a", "deny"))]
    renderer = Recorder()
    ctl = controller(cache, [record("db", "10.0.1.5")], renderer)
    ctl.apply_all()
    ctl.apply_all()  # a change elsewhere in the cluster: the same rules here
    assert renderer.calls == ["apply"]
    ctl.changed("dataplane")  # VPP reconnected: its ACLs are gone
    ctl.apply_all()
    ctl.apply_all(force=True)
    assert renderer.calls == ["apply", "apply", "apply"]


def test_a_full_apply_during_an_add_keeps_the_new_pods_rules() -> None:
    cache = Cache()
    cache.policy_list = [policy_from_k8s(policy("a", "deny"))]
    renderer = Recorder()
    records: list[PodRecord] = []
    ctl = PolicyController(cache, [renderer], "n1", lambda: [NODE_IP], lambda: list(records),
                           debounce=0, sync_wait=0)
    new = record("db", "10.0.1.5")
    ctl.admit(new)  # the ADD goes on (podside, commit): its record is not known yet
    ctl.apply_all()
    assert list(renderer.state) == [new.key] and renderer.state[new.key].isolated
    records.append(new)  # committed
    ctl.apply_all()
    assert list(renderer.state) == [new.key]


def test_the_index_is_kept_and_follows_pods_elsewhere() -> None:
    cache = Cache()
    db = pod_from_k8s(pod("a", "db", "10.0.1.5", {"app": "db"}))
    cache.pod_list = [db]
    cache.policy_list = [policy_from_k8s(policy("a", "p", podSelector={
        "matchLabels": {"app": "db"}}, ingress=[FROM_WEB]))]
    renderer = Recorder()
    ctl = controller(cache, [record("db", "10.0.1.5")], renderer)

    def peers() -> list[str]:
        shared = renderer.state[PodKey("c-db", "eth0")].policy.ingress.shared
        assert shared is not None
        return [str(m) for r in shared for s in r.sets for m in s.members]
    ctl.run_once()
    assert peers() == []
    elsewhere = pod_from_k8s(pod("a", "web-1", "10.0.2.7", {"app": "web"}, node="n2"))
    cache.pod_list = [db, elsewhere]
    ctl.run_once()
    assert peers() == ["10.0.2.7"]
    cache.pod_list = [db, pod_from_k8s(pod("a", "web-1", "10.0.2.7", {"app": "api"},
                                           node="n2"))]  # relabelled: out of the set
    ctl.run_once()
    assert peers() == []
    ctl.admit(record("web", "10.0.1.6", "c-web"))  # an ADD uses the same index
    cache.pod_list = [db]
    ctl.run_once()
    assert ctl._index.rebuilds == 1 and ctl._index.updates >= 3

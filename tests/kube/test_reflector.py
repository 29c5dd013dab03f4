"""The reflector against a real kube-apiserver, as the token user bound only to the shipped
ClusterRole (tests/kube/conftest; skipped without VSWITCH_TEST_KUBE_APISERVER).

Test plan:
- list, then watch: objects of every kind made before start() are in the caches once synced
  (the first list is one on_change per kind); creates, updates and deletes of each kind after
  it reach the caches and on_change (by kind); an update that changes nothing the agent keeps
  (a pod's annotation) is no change; `policies()` is one mapping until a policy changes;
- a watch the server ends (timeoutSeconds) is resumed: no relist, and changes still arrive;
- bookmarks move a cache's revision with no change of its kind;
- a broken connection (reset by a proxy that then refuses connections) relists: what changed
  meanwhile reaches the caches and on_change; `error` says why while the API is away, and
  clears;
- the API server killed and restarted (same port, same etcd): the caches relist and follow;
- pod(): a cache hit, a miss that GETs the pod (the reflector not even started), a pod that does
  not exist (None), an unreachable API (None within the GET's bound);
- a refused NetworkPolicy (the API accepts it, the parser does not) and a refused Node are logged
  once, counted, left out, and taken in once corrected;
- stop() is quick with four watches open, and leaves no thread of the reflector;
- pod_changes: every pod first, then only the pods changed since the token (a relabelled pod,
  a deleted one; not one whose annotation changed), and nothing more once read;
- (tests/kube/test_expiry: 410 Gone; tests/kube/test_rbac: the role suffices and no more.)
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from ipaddress import ip_address

import pytest

from agent.kube.objects import KubeNode
from policy import PodKey
from testbed.kube import KubeApiServer
from testbed.tcpproxy import TcpProxy
from tests.kube.conftest import RunFactory, eventually, needs_apiserver

pytestmark = needs_apiserver

NETPOL = "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_ns(api: KubeApiServer, labels: dict[str, str] | None = None) -> str:
    name = fresh("ns")
    api.must("POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": labels or {}}})
    return name


def pod_body(name: str, labels: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "pause",
                                     "ports": [{"name": "http", "containerPort": 8080}]}]}}


def policy_body(name: str, cidr: str = "10.0.0.0/8") -> dict[str, object]:
    return {"metadata": {"name": name},
            "spec": {"podSelector": {"matchLabels": {"app": "db"}},
                     "ingress": [{"from": [{"ipBlock": {"cidr": cidr}}]}]}}


def node_body(name: str, ip: str) -> dict[str, object]:
    return {"metadata": {"name": name},
            "status": {"addresses": [{"type": "InternalIP", "address": ip},
                                     {"type": "Hostname", "address": name}]}}


def test_list_then_watch_follows_every_kind(apiserver: KubeApiServer,
                                            make_state: RunFactory) -> None:
    api = apiserver
    ns = make_ns(api, {"team": "a"})
    api.must("POST", f"/api/v1/namespaces/{ns}/pods", pod_body("before", {"app": "db"}))
    api.must("POST", NETPOL.format(ns=ns), policy_body("before"))
    node = fresh("node")
    api.must("POST", "/api/v1/nodes", node_body(node, "192.168.16.1"))

    run = make_state()
    state = run.state
    assert state.wait_synced(20), state.error
    assert state.pods()[PodKey(ns, "before")].labels == {"app": "db"}
    assert state.pods()[PodKey(ns, "before")].ports[0].name == "http"
    assert state.namespaces()[ns].labels["team"] == "a"
    selector = state.policies()[PodKey(ns, "before")].pod_selector
    assert selector.match_labels == frozenset({("app", "db")})
    assert state.policies() is state.policies()  # one mapping until the policies change
    assert state.nodes()[node].internal_ips == (ip_address("192.168.16.1"),)
    assert state.error == ""
    listed = {k: run.changes.count(k) for k in ("pods", "namespaces", "networkpolicies", "nodes")}
    assert listed == {"pods": 1, "namespaces": 1, "networkpolicies": 1, "nodes": 1}  # one each

    # creates
    api.must("POST", f"/api/v1/namespaces/{ns}/pods", pod_body("after", {"app": "web"}))
    api.must("POST", NETPOL.format(ns=ns), policy_body("after"))
    node2 = fresh("node")
    api.must("POST", "/api/v1/nodes", node_body(node2, "192.168.16.2"))
    ns2 = make_ns(api)
    eventually(lambda: (ns, "after") in state.pods() and (ns, "after") in state.policies()
               and node2 in state.nodes() and ns2 in state.namespaces(), what="the creates")
    # updates
    merge = {"content_type": "application/merge-patch+json"}
    api.must("PATCH", f"/api/v1/namespaces/{ns}/pods/after",
             {"metadata": {"labels": {"app": "db"}}}, **merge)
    api.must("PATCH", f"/api/v1/namespaces/{ns2}", {"metadata": {"labels": {"x": "y"}}}, **merge)
    api.must("PATCH", f"{NETPOL.format(ns=ns)}/after", {"spec": {"ingress": []}}, **merge)
    api.must("PATCH", f"/api/v1/nodes/{node2}/status",
             {"status": {"addresses": [{"type": "InternalIP", "address": "192.168.16.3"}]}},
             **merge)
    eventually(lambda: state.pods()[PodKey(ns, "after")].labels == {"app": "db"}
               and state.namespaces()[ns2].labels.get("x") == "y"
               and state.policies()[PodKey(ns, "after")].ingress == ()
               and state.nodes()[node2].internal_ips == (ip_address("192.168.16.3"),),
               what="the updates")
    # deletes
    api.must("DELETE", f"/api/v1/namespaces/{ns}/pods/before?gracePeriodSeconds=0")
    api.must("DELETE", f"{NETPOL.format(ns=ns)}/before")
    api.must("DELETE", f"/api/v1/nodes/{node}")
    eventually(lambda: (ns, "before") not in state.pods()
               and (ns, "before") not in state.policies() and node not in state.nodes(),
               what="the deletes")
    assert {k: run.changes.count(k) for k in ("pods", "namespaces", "networkpolicies", "nodes")} \
        == {"pods": 4, "namespaces": 3, "networkpolicies": 4, "nodes": 4}

    # a change the agent does not keep is no change
    api.must("PATCH", f"/api/v1/namespaces/{ns}/pods/after",
             {"metadata": {"annotations": {"note": "x"}}}, **merge)
    api.must("PATCH", f"/api/v1/namespaces/{ns}", {"metadata": {"labels": {"seen": "1"}}},
             **merge)  # a later event of another kind: the annotation's is in by then
    eventually(lambda: state.namespaces()[ns].labels.get("seen") == "1")
    time.sleep(0.3)
    assert run.changes.count("pods") == 4
    assert all(run.lists(kind) == 1 for kind in ("pods", "namespaces", "nodes"))


def test_routine_end_of_a_watch_resumes_without_a_relist(apiserver: KubeApiServer,
                                                          make_state: RunFactory) -> None:
    run = make_state(watch_timeout=1)  # the server ends each watch after 1-2 s
    assert run.state.wait_synced(20)
    time.sleep(4.5)  # two or more routine ends per kind
    ns = make_ns(apiserver)
    eventually(lambda: ns in run.state.namespaces())
    assert [run.lists(k) for k in ("pods", "namespaces", "networkpolicies", "nodes")] == [1] * 4
    assert run.state.error == ""


def test_bookmarks_move_the_revision(apiserver: KubeApiServer, make_state: RunFactory) -> None:
    run = make_state(watch_timeout=2)  # a bookmark comes 2 s before each watch's end
    assert run.state.wait_synced(20)
    told = run.changes.count("networkpolicies")
    ns = make_ns(apiserver)  # moves etcd's revision; no NetworkPolicy changes
    revision = int(apiserver.must("GET", f"/api/v1/namespaces/{ns}")["metadata"]
                   ["resourceVersion"])
    eventually(lambda: int(run.state.revisions()["networkpolicies"] or 0) >= revision,
               timeout=20, what="a bookmark at or after the namespace's revision")
    assert run.changes.count("networkpolicies") == told and run.lists("networkpolicies") == 1


def test_a_broken_connection_relists_and_the_diff_reaches_on_change(
        apiserver: KubeApiServer, make_state: RunFactory) -> None:
    api = apiserver
    ns = make_ns(api)
    api.must("POST", f"/api/v1/namespaces/{ns}/pods", pod_body("old", {}))
    with TcpProxy(api.port) as proxy:
        run = make_state(port=proxy.port)
        state = run.state
        assert state.wait_synced(20) and (ns, "old") in state.pods()
        proxy.hold = True
        assert proxy.cut() >= 4  # the four watches at least
        api.must("POST", f"/api/v1/namespaces/{ns}/pods", pod_body("new", {}))
        api.must("DELETE", f"/api/v1/namespaces/{ns}/pods/old?gracePeriodSeconds=0")
        eventually(lambda: "pods" in state.error, what="the error while the API is away")
        assert (ns, "old") in state.pods()  # the caches keep the last state seen
        changes_before = run.changes.count("pods")
        proxy.hold = False
        eventually(lambda: (ns, "new") in state.pods() and (ns, "old") not in state.pods(),
                   what="the relist's diff")
        eventually(lambda: state.error == "", what="the error cleared")
        assert run.changes.count("pods") > changes_before
        assert run.lists("pods") >= 2


def test_the_api_server_restarted(apiserver: KubeApiServer, make_state: RunFactory) -> None:
    api = apiserver
    run = make_state()
    assert run.state.wait_synced(20)
    api.stop()
    try:
        eventually(lambda: run.state.error != "", what="the error while the server is down")
    finally:
        api.start()
    ns = make_ns(api)
    eventually(lambda: ns in run.state.namespaces(), timeout=30, what="the namespace")
    eventually(lambda: run.state.error == "")
    assert run.lists("namespaces") >= 2


def test_pod_reads_the_cache_and_gets_a_miss(apiserver: KubeApiServer,
                                             make_state: RunFactory) -> None:
    api = apiserver
    ns = make_ns(api)
    api.must("POST", f"/api/v1/namespaces/{ns}/pods", pod_body("p", {"app": "x"}))
    cold = make_state(start=False).state  # no cache at all: only the GET can know the pod
    pod = cold.pod(ns, "p")
    assert pod is not None and pod.labels == {"app": "x"} and pod.ports[0].port == 8080
    assert cold.pod(ns, "nope") is None
    assert cold.pods() == {}  # the GET's answer is not cached

    warm = make_state().state
    assert warm.wait_synced(20)
    assert warm.pod(ns, "p") == pod


def test_pod_is_bounded_when_the_api_does_not_answer(apiserver: KubeApiServer,
                                                     make_state: RunFactory) -> None:
    with TcpProxy(apiserver.port) as proxy:
        proxy.hold = True  # every connection reset at once
        state = make_state(port=proxy.port, start=False, get_timeout=1.0).state
        started = time.monotonic()
        assert state.pod("default", "p") is None
        assert time.monotonic() - started < 2.0


def test_refused_objects_are_logged_once_counted_and_left_out(
        apiserver: KubeApiServer, make_state: RunFactory,
        caplog: pytest.LogCaptureFixture) -> None:
    api = apiserver
    ns = make_ns(api)
    # Kubernetes 1.28 reads "010.0.0.0/8" sloppily, as 10.0.0.0/8: so does the parser
    api.must("POST", NETPOL.format(ns=ns), policy_body("zeros", "010.0.0.0/8"))
    node = fresh("node")
    api.must("POST", "/api/v1/nodes", node_body(node, "not-an-ip"))
    caplog.set_level(logging.ERROR, logger="agent.kube")
    run = make_state(resync=1.0)  # relists: a refusal is still logged and counted once
    state = run.state
    assert state.wait_synced(20)
    eventually(lambda: run.lists("nodes") >= 3, what="two relists")
    assert node not in state.nodes() and run.refused("nodes") == 1
    block = state.policies()[PodKey(ns, "zeros")].ingress[0].peers[0].ip_block
    assert block is not None and str(block.cidr) == "10.0.0.0/8"
    assert run.refused("networkpolicies") == 0
    refused = state.refused()
    assert "not an IP address" in refused[f"nodes {node}"]
    assert len([r for r in caplog.records if node in r.getMessage()]) == 1

    merge = {"content_type": "application/merge-patch+json"}
    api.must("PATCH", f"/api/v1/nodes/{node}/status",
             {"status": {"addresses": [{"type": "InternalIP", "address": "192.168.16.9"}]}},
             **merge)
    eventually(lambda: node in state.nodes())
    assert state.nodes()[node] == KubeNode(node, state.nodes()[node].uid,
                                           (ip_address("192.168.16.9"),))
    assert state.refused() == {}
    api.must("DELETE", f"/api/v1/nodes/{node}")


def test_stop_is_quick_and_leaves_no_thread(apiserver: KubeApiServer,
                                            make_state: RunFactory) -> None:
    run = make_state()
    assert run.state.wait_synced(20)
    time.sleep(0.3)  # the four watches open
    started = time.monotonic()
    run.state.stop()
    assert time.monotonic() - started < 1.0
    assert [t.name for t in threading.enumerate() if t.name.startswith("kube-")] == []


def test_pod_changes_gives_every_pod_then_only_the_changed_ones(
        apiserver: KubeApiServer, make_state: RunFactory) -> None:
    api = apiserver
    ns = make_ns(api)
    for name in ("a", "b", "c"):
        api.must("POST", f"/api/v1/namespaces/{ns}/pods", pod_body(name, {"app": "db"}))
    state = make_state().state
    assert state.wait_synced(20), state.error
    first = state.pod_changes(None)
    assert first.full is not None and {PodKey(ns, n) for n in "abc"} <= set(first.full)
    merge = {"content_type": "application/merge-patch+json"}
    api.must("PATCH", f"/api/v1/namespaces/{ns}/pods/a", {"metadata": {"labels": {"app": "web"}}},
             **merge)
    api.must("PATCH", f"/api/v1/namespaces/{ns}/pods/b", {"metadata": {"annotations": {"n": "1"}}},
             **merge)
    api.must("DELETE", f"/api/v1/namespaces/{ns}/pods/c?gracePeriodSeconds=0")
    eventually(lambda: PodKey(ns, "c") not in state.pods(), what="the delete")
    got = state.pod_changes(first.token)
    mine = {k: v for k, v in got.changed.items() if k.namespace == ns}
    assert got.full is None and set(mine) == {PodKey(ns, "a"), PodKey(ns, "c")}, mine
    relabelled = mine[PodKey(ns, "a")]
    assert relabelled is not None and relabelled.labels == {"app": "web"}
    assert mine[PodKey(ns, "c")] is None
    assert state.pod_changes(got.token).changed == {}

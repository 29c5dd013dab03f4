"""The reflector's pure parts, offline (no API server): watch events, Nodes, paths, refusals,
and the shipped role against the kinds watched.

Test plan:
- a watch event's JSON maps as agent/infra/listwatch says: ADDED/MODIFIED -> Put (a refused
  object -> Delete), DELETED -> Delete, BOOKMARK -> Bookmark, ERROR 410 -> WatchExpired, any
  other ERROR, an unknown type or a malformed line -> KubeError;
- a Node keeps its name, uid and InternalIPs (in order, no repeats); a bad one is refused;
- each kind's collection and object URLs;
- refusals: logged once per error text, counted once, forgotten when accepted or listed away;
- the ClusterRole in k8s/base names exactly the kinds the reflector watches.
"""

from __future__ import annotations

import logging
from ipaddress import ip_address
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter

import policy
from agent.infra.watchstream import Bookmark, Delete, Put, WatchExpired
from agent.kube.objects import (
    ENDPOINTSLICES,
    NAMESPACES,
    NODES,
    PODS,
    POLICIES,
    SERVICES,
    Key,
    KubeError,
    KubeNode,
    NodeError,
    node_from_k8s,
    watch_event,
)
from agent.kube.refusals import Refusals

RBAC = Path(__file__).resolve().parents[2] / "k8s" / "base" / "rbac.yaml"


def pod(name: str = "p", rv: str = "7", **labels: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "web", "name": name, "resourceVersion": rv,
                         "labels": labels}}


def decode_pod(key: Key, obj: Any) -> policy.Pod | None:
    try:
        return policy.pod_from_k8s(obj)
    except policy.PolicyError:
        return None


def test_added_and_modified_are_puts() -> None:
    for kind in ("ADDED", "MODIFIED"):
        event = watch_event({"type": kind, "object": pod(app="db")}, decode_pod)
        assert event == Put(("web", "p"), policy.Pod("web", "p", {"app": "db"}), "7")


def test_a_refused_object_is_a_delete() -> None:
    bad = pod()
    bad["spec"] = {"nodeName": 3}
    assert watch_event({"type": "MODIFIED", "object": bad}, decode_pod) == Delete(("web", "p"), "7")


def test_deleted_and_bookmark() -> None:
    assert watch_event({"type": "DELETED", "object": pod(rv="9")}, decode_pod) == \
        Delete(("web", "p"), "9")
    bookmark = {"type": "BOOKMARK",
                "object": {"kind": "Pod", "metadata": {"resourceVersion": "12"}}}
    assert watch_event(bookmark, decode_pod) == Bookmark("12")


def test_cluster_scoped_keys_have_no_namespace() -> None:
    event = watch_event({"type": "ADDED", "object": {"metadata": {"name": "n1",
                        "resourceVersion": "3"}}}, lambda key, obj: key)
    assert event == Put(("", "n1"), ("", "n1"), "3")


def test_errors() -> None:
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                        "message": "too old resource version: 1 (200)"}}
    with pytest.raises(WatchExpired, match="too old resource version"):
        watch_event(gone, decode_pod)
    internal = {"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "boom"}}
    with pytest.raises(KubeError, match="boom") as err:
        watch_event(internal, decode_pod)
    assert err.value.status == 500
    malformed: list[object] = [
        {"type": "ADDED"}, [], {"type": "SURPRISE", "object": pod()},
        {"type": "ADDED", "object": {"metadata": {"name": "x"}}},  # no resourceVersion
        {"type": "ADDED", "object": {"metadata": {"resourceVersion": "1"}}}]  # no name
    for line in malformed:
        with pytest.raises(KubeError):
            watch_event(line, decode_pod)


def test_node_conversion() -> None:
    node = node_from_k8s({"metadata": {"name": "n1", "uid": "u-1"}, "status": {"addresses": [
        {"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.1"},
        {"type": "ExternalIP", "address": "203.0.113.1"},
        {"type": "InternalIP", "address": "fd00::1"}, {"type": "InternalIP", "address": "10.0.0.1"},
    ]}})
    assert node == KubeNode("n1", "u-1", (ip_address("10.0.0.1"), ip_address("fd00::1")))
    assert node_from_k8s({"metadata": {"name": "n2"}}) == KubeNode("n2")
    with pytest.raises(NodeError, match=r"Node n3: status.addresses\[0\].address='n3.local'"):
        node_from_k8s({"metadata": {"name": "n3"},
                       "status": {"addresses": [{"type": "InternalIP", "address": "n3.local"}]}})
    with pytest.raises(NodeError, match=r"metadata\.name"):
        node_from_k8s({"metadata": {}})


def test_paths() -> None:
    assert PODS.object_path("web", "p") == "/api/v1/namespaces/web/pods/p"
    assert POLICIES.object_path("web", "np") == \
        "/apis/networking.k8s.io/v1/namespaces/web/networkpolicies/np"
    assert NAMESPACES.object_path("", "web") == "/api/v1/namespaces/web"
    assert NODES.object_path("", "n1") == "/api/v1/nodes/n1"


def test_refusals_are_logged_and_counted_once(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    refusals = Refusals(Counter("refused", "", ["kind"], registry=registry))

    def count() -> float:
        return registry.get_sample_value("refused_total", {"kind": "nodes"}) or 0.0

    bad: dict[str, Any] = {"metadata": {"name": "n1"},
           "status": {"addresses": [{"type": "InternalIP", "address": "x"}]}}
    caplog.set_level(logging.ERROR)
    for _ in range(3):  # every relist and every resourceVersion that is still as bad
        assert refusals.decode(NODES, ("", "n1"), bad) is None
    assert count() == 1 and len(caplog.records) == 1
    assert "nodes n1 left out (refused): Node n1: status.addresses[0]" in caplog.text
    assert list(refusals.refused()) == ["nodes n1"]
    assert refusals.decode(NODES, ("", "n1"), {"metadata": {"name": "n1"}}) == KubeNode("n1")
    assert refusals.refused() == {}
    refusals.decode(NODES, ("", "n1"), bad)  # bad again: counted again
    assert count() == 2
    refusals.keep_only("nodes", set())  # listed away
    assert refusals.refused() == {}


def test_the_shipped_role_names_exactly_the_kinds_watched() -> None:
    (role,) = [d for d in yaml.safe_load_all(RBAC.read_text()) if d and d["kind"] == "ClusterRole"]
    granted = {(group, resource) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"]}
    watched = set()
    for kind in (PODS, NAMESPACES, POLICIES, NODES, SERVICES, ENDPOINTSLICES):
        parts = kind.path.strip("/").split("/")  # api/v1/pods, apis/GROUP/v1/networkpolicies
        watched.add(("" if parts[0] == "api" else parts[1], parts[-1]))
    assert granted == watched

"""The shipped ClusterRole (k8s/base/rbac.yaml) on a real kube-apiserver's RBAC (skipped without
VSWITCH_TEST_KUBE_APISERVER).

Test plan:
- it suffices: every other test in tests/kube runs the reflector as a user bound to this role
  only (lists, watches with bookmarks, the pod GET); here, the server's own access review says
  get, list and watch are allowed on the six kinds, also within one namespace;
- nothing more: writes to those kinds, their subresources (a node's or a pod's status) and other
  kinds (secrets, config maps, endpoints) are denied.
(tests/kube/test_objects checks offline that the role names exactly the kinds watched.)
"""

from __future__ import annotations

import pytest

from testbed.kube import KubeApiServer
from tests.kube.conftest import USER, needs_apiserver

pytestmark = needs_apiserver

KINDS = [("", "pods"), ("", "namespaces"), ("", "nodes"), ("networking.k8s.io", "networkpolicies"),
         ("", "services"), ("discovery.k8s.io", "endpointslices")]


def allowed(api: KubeApiServer, verb: str, group: str, resource: str, namespace: str = "",
            subresource: str = "") -> bool:
    review = api.must("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": USER, "groups": ["system:authenticated"], "resourceAttributes": {
            "verb": verb, "group": group, "resource": resource, "namespace": namespace,
            "subresource": subresource}}})
    return bool(review["status"].get("allowed"))


@pytest.mark.parametrize(("group", "resource"), KINDS)
def test_the_role_allows_reading_the_watched_kinds(apiserver: KubeApiServer, group: str,
                                                   resource: str) -> None:
    for verb in ("get", "list", "watch"):
        assert allowed(apiserver, verb, group, resource), (verb, resource)
        assert allowed(apiserver, verb, group, resource, namespace="default"), (verb, resource)


@pytest.mark.parametrize(("group", "resource"), KINDS)
def test_the_role_allows_no_write(apiserver: KubeApiServer, group: str, resource: str) -> None:
    for verb in ("create", "update", "patch", "delete", "deletecollection"):
        assert not allowed(apiserver, verb, group, resource), (verb, resource)


def test_the_role_allows_nothing_else(apiserver: KubeApiServer) -> None:
    assert not allowed(apiserver, "get", "", "nodes", subresource="status")
    assert not allowed(apiserver, "update", "", "pods", "default", subresource="status")
    assert not allowed(apiserver, "create", "", "pods", "default", subresource="exec")
    for group, resource in [("", "secrets"), ("", "configmaps"), ("", "endpoints"),
                            ("", "serviceaccounts"), ("apps", "daemonsets"),
                            ("rbac.authorization.k8s.io", "clusterroles")]:
        assert not allowed(apiserver, "list", group, resource), resource

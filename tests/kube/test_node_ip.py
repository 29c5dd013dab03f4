"""The node IP from the Kubernetes API (agent/app/kube_side.api_node_ip), against a real
kube-apiserver as the shipped ClusterRole's user.

Test plan: with neither NodeIP nor NODE_IP, the first InternalIP of the agent's Node; NodeIP or
NODE_IP given: no request, ""; no such Node, a Node without an InternalIP, or no API at all: "".
"""

from __future__ import annotations

from agent.app.config import parse
from agent.app.kube_side import api_node_ip
from testbed.kube import KubeApiServer
from tests.kube.conftest import USER, needs_apiserver
from tests.kube.test_reflector import fresh, node_body


@needs_apiserver
def test_the_nodes_internal_ip_when_nothing_else_gives_one(apiserver: KubeApiServer) -> None:
    name = fresh("node")
    apiserver.must("POST", "/api/v1/nodes", node_body(name, "192.0.2.10"))
    try:
        kubeconfig = str(apiserver.kubeconfig(USER))
        cfg = parse({"NodeName": name, "KubeConfig": kubeconfig})
        assert api_node_ip(cfg, {}) == "192.0.2.10"
        assert api_node_ip(cfg, {"NODE_IP": "192.0.2.20"}) == ""
        assert api_node_ip(parse({"NodeName": name, "KubeConfig": kubeconfig,
                                  "NodeIP": "192.0.2.30"}), {}) == ""
        assert api_node_ip(parse({"NodeName": fresh("gone"), "KubeConfig": kubeconfig}), {}) == ""
        apiserver.must("PATCH", f"/api/v1/nodes/{name}/status",
                       {"status": {"addresses": [{"type": "Hostname", "address": name}]}},
                       content_type="application/merge-patch+json")  # replaces the list
        assert api_node_ip(cfg, {}) == ""
    finally:
        apiserver.request("DELETE", f"/api/v1/nodes/{name}")


def test_no_api_no_request() -> None:
    assert api_node_ip(parse({"NodeName": "n"}), {}) == ""

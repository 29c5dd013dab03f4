"""The REST server over real HTTP on loopback, with a small in-test RestSource.

Test plan: every endpoint answers the documented JSON (and the paths match docs/openapi.yaml);
query filters work; malformed, unknown or repeated query parameters are 400; unknown paths 404;
every method but GET 405 with `Allow: GET`; a source failing with TryAgainLater gives 503 and any
other failure 500, and the server keeps serving; a garbage request line is a 400; an idle client
does not block others.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from agent.api.rest import ROUTES, RestServer
from agent.model.errors import NotReady, TryAgainLater
from ipam import IPAMConfig, NodeNetworks, node_networks

_DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "docs")


@dataclass
class Source:
    """Implements agent.rest.RestSource from plain fields."""

    node_id: int = 3
    node_name: str = "worker-3"
    node_ip: str = "192.168.16.3"
    ipam_config: IPAMConfig = field(default_factory=lambda: IPAMConfig.from_mapping(
        {"PodSubnetV6CIDR": "fd00:10::/48"})[0])
    networks: NodeNetworks | None = None
    is_ready: tuple[bool, str] = (True, "ready")
    fail: Exception | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    nodes: dict[str, Any] | None = None
    policy_on: bool = True

    def allocations(self) -> Mapping[str, Mapping[str, Any]]:
        if self.fail is not None:
            raise self.fail
        return {
            "10.1.3.2": {"container_id": "c1", "ifname": "eth0", "pod_namespace": "default",
                         "pod_name": "web", "since": 1700000000.5},
            "fd00:10:0:3::2": {"container_id": "c1", "ifname": "eth0",
                               "pod_namespace": "default", "pod_name": "web",
                               "since": 1700000000.5},
        }

    def pod_records(self) -> list[dict[str, Any]]:
        return self.records

    def pool_usage(self) -> list[dict[str, object]]:
        return [{"subnet": "10.1.3.0/24", "capacity": 252, "inUse": 1, "free": 251},
                {"subnet": "fd00:10:0:3::/64", "capacity": 2**64 - 4, "inUse": 1,
                 "free": 2**64 - 5}]

    def ready(self) -> tuple[bool, str]:
        return self.is_ready

    def live(self) -> bool:
        return True

    def metrics_text(self) -> str:
        return "# TYPE vswitch_cni_pods gauge\nvswitch_cni_pods 1\n"

    def last_reconcile(self) -> dict[str, Any]:
        return {"finished": 1700000000.0, "repaired": [], "damaged": []}

    def check_pod(self, container_id: str, ifname: str) -> dict[str, Any] | None:
        if (container_id, ifname) != ("c1", "eth0"):
            return None
        return {"containerId": container_id, "ifname": ifname, "ok": False,
                "problems": ["netns /run/netns/x is gone"], "record": {"container_id": "c1"}}

    def pod_policy(self, namespace: str, name: str) -> dict[str, Any] | None:
        if not self.policy_on:
            raise NotReady("NetworkPolicy is off on this node: no Kubernetes API configured")
        if (namespace, name) != ("web", "db-0"):
            return None
        return {"pod": "web/db-0", "attachments": [{"ingress": {"isolated": True, "rules": []}}]}

    def mesh_nodes(self) -> dict[str, Any]:
        if self.nodes is None:
            raise NotReady("this node is not in the node registry: the agent is starting")
        return self.nodes


@pytest.fixture
def source() -> Source:
    src = Source()
    src.networks = node_networks(src.ipam_config, src.node_id)
    return src


@pytest.fixture
def server(source: Source) -> Iterator[RestServer]:
    srv = RestServer([("127.0.0.1", 0)], source)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def request(srv: RestServer, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(*srv.address, timeout=10)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def get_json(srv: RestServer, path: str, status: int = 200) -> Any:
    got, headers, body = request(srv, path)
    assert got == status, body
    assert headers["content-type"] == "application/json"
    return json.loads(body)


def test_contiv_ipam_answer(server: RestServer) -> None:
    assert get_json(server, "/contiv/v1/ipam") == {
        "nodeId": 3, "nodeName": "worker-3", "nodeIP": "192.168.16.3",
        "podNetwork": "10.1.3.0/24", "podNetworks": ["10.1.3.0/24", "fd00:10:0:3::/64"],
        "vppHostNetwork": "172.30.3.0/24",
        "config": {
            "podSubnetCIDR": "10.1.0.0/16", "podNetworkPrefixLen": 24,
            "podSubnetV6CIDR": "fd00:10::/48", "podNetworkV6PrefixLen": 64,
            "vppHostSubnetCIDR": "172.30.0.0/16", "vppHostNetworkPrefixLen": 24,
            "nodeInterconnectCIDR": "192.168.16.0/24", "nodeInterconnectDHCP": False,
            "vxlanCIDR": "192.168.30.0/24", "serviceCIDR": "10.96.0.0/12",
            "contivCIDR": "", "defaultGateway": "",
        },
    }


def test_ipam_before_node_id_is_503(source: Source, server: RestServer) -> None:
    source.networks = None
    assert "not assigned" in get_json(server, "/contiv/v1/ipam", 503)["error"]


def test_allocations_and_family_filter(server: RestServer) -> None:
    web = {"pod": "default/web", "containerId": "c1", "ifname": "eth0", "since": 1700000000.5}
    assert get_json(server, "/v1/allocations") == {
        "allocations": {"10.1.3.2": web, "fd00:10:0:3::2": web}}
    v6 = get_json(server, "/v1/allocations?family=6")["allocations"]
    assert all(ipaddress.ip_address(ip).version == 6 for ip in v6) and len(v6) == 1
    assert list(get_json(server, "/v1/allocations?family=4")["allocations"]) == ["10.1.3.2"]


def test_pools_pods_reconcile(source: Source, server: RestServer) -> None:
    pools = get_json(server, "/v1/pools")["pools"]
    assert [p["family"] for p in pools] == [4, 6]
    assert pools[0] == {"family": 4, "subnet": "10.1.3.0/24", "capacity": 252, "inUse": 1,
                        "free": 251}
    # 2^64 - 4 is beyond what JSON clients hold exactly (a double): capped at 2^53 - 1
    assert pools[1] == {"family": 6, "subnet": "fd00:10:0:3::/64", "capacity": 2**53 - 1,
                        "inUse": 1, "free": 2**53 - 1}
    source.records = [{"container_id": "c1", "pod_namespace": "default"},
                      {"container_id": "c2", "pod_namespace": "kube-system"}]
    assert len(get_json(server, "/v1/pods")["pods"]) == 2
    assert get_json(server, "/v1/pods?namespace=kube-system")["pods"] == [
        {**source.records[1], "pod": "kube-system/(no pod name)"}]
    # podman sends K8S_POD_NAME only: said so, never shown as "/name"
    source.records = [{"container_id": "c3", "pod_namespace": "", "pod_name": "web"}]
    assert get_json(server, "/v1/pods")["pods"][0]["pod"] == "web (no namespace)"
    assert get_json(server, "/v1/reconcile")["damaged"] == []


def test_health_and_metrics(source: Source, server: RestServer) -> None:
    assert get_json(server, "/liveness") == {"live": True}
    assert get_json(server, "/readiness") == {"ready": True, "reason": "ready"}
    source.is_ready = (False, "etcd unreachable")
    assert get_json(server, "/readiness", 503) == {"ready": False, "reason": "etcd unreachable"}
    status, headers, body = request(server, "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    assert b"vswitch_cni_pods 1" in body


@pytest.mark.parametrize("query", ["?family=5", "?family=4&family=6", "?famly=4", "?family",
                                   "?&&", "?x=1"])
def test_bad_queries_are_400_naming_the_problem(server: RestServer, query: str) -> None:
    error = get_json(server, f"/v1/allocations{query}", 400)["error"]
    assert "family" in error or "query" in error


def test_unknown_paths_are_404(server: RestServer) -> None:
    for path in ("/", "/v1", "/v1/pods/", "/contiv/v1/ipam/x", "/%ff"):
        assert "no such path" in get_json(server, path, 404)["error"]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "BREW"])
def test_other_methods_are_405(server: RestServer, method: str) -> None:
    status, headers, _ = request(server, "/v1/pods", method)
    assert status == 405 and headers["allow"] == "GET"


def test_source_failures_are_503_or_500_and_serving_goes_on(source: Source,
                                                            server: RestServer) -> None:
    source.fail = TryAgainLater("etcd is unreachable")
    assert "unreachable" in get_json(server, "/v1/allocations", 503)["error"]
    source.fail = RuntimeError("boom")
    assert "boom" in get_json(server, "/v1/allocations", 500)["error"]
    assert get_json(server, "/liveness") == {"live": True}


def test_garbage_request_and_idle_client(server: RestServer) -> None:
    idle = socket.create_connection(server.address, timeout=10)  # says nothing, stays open
    try:
        with socket.create_connection(server.address, timeout=10) as bad:
            bad.sendall(b"\x00\x01 nonsense\r\n\r\n")
            assert b" 400 " in bad.recv(4096).split(b"\r\n")[0] + b" "
        assert get_json(server, "/liveness") == {"live": True}
    finally:
        idle.close()


def test_nodes_view_and_503_before_registration(source: Source, server: RestServer) -> None:
    status, _, body = request(server, "/v1/nodes")
    assert status == 503 and b"not in the node registry" in body
    source.nodes = {"local": {"name": "worker-3"}, "revision": 7, "registryError": "",
                    "nodes": [{"name": "worker-4", "mesh": {"state": "failed", "reason": "x"}}]}
    assert get_json(server, "/v1/nodes") == source.nodes


def test_documented_paths_match_the_routes() -> None:
    with open(os.path.join(_DOCS, "openapi.yaml"), encoding="utf-8") as f:
        spec = yaml.safe_load(f)
    assert spec["openapi"].startswith("3.")
    assert set(spec["paths"]) == {*ROUTES, "/v1/pods/{containerId}/check",
                                  "/v1/policy/{namespace}/{name}"}
    for path, item in spec["paths"].items():
        assert set(item) == {"get"}, path
    with open(os.path.join(_DOCS, "rest-api.md"), encoding="utf-8") as f:
        text = f.read()
    for path in [*ROUTES, "/v1/pods/<container ID>/check", "/v1/policy/<namespace>/<pod>"]:
        assert f"GET {path}" in text


def raw_exchange(srv: RestServer, data: bytes) -> tuple[int, dict[str, str], bytes]:
    with socket.create_connection(srv.address, timeout=10) as conn:
        conn.sendall(data)
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


@pytest.mark.parametrize(("data", "status"), [
    (b"\x00\x01 nonsense\r\n\r\n", 400),
    (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
    (b"GET /liveness HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(120))
     + b"\r\n", 431),
], ids=["bad request line", "URI too long", "too many headers"])
def test_the_servers_own_refusals_are_json(server: RestServer, data: bytes, status: int) -> None:
    got, headers, body = raw_exchange(server, data)
    assert got == status
    assert headers["content-type"] == "application/json"
    assert isinstance(json.loads(body)["error"], str)
    assert get_json(server, "/liveness") == {"live": True}


def test_replies_are_not_held_back_by_nagle(server: RestServer) -> None:
    """The accepted connection has TCP_NODELAY (the headers and the body are two writes)."""
    conn = http.client.HTTPConnection(*server.address, timeout=10)
    try:
        conn.request("GET", "/liveness")
        conn.getresponse().read()
        client_end = conn.sock.getsockname()
        served = []
        for name in os.listdir("/proc/self/fd"):
            try:
                sock = socket.socket(fileno=os.dup(int(name)))
            except OSError:
                continue  # not a socket
            with sock:
                if sock.family == socket.AF_INET and sock.type == socket.SOCK_STREAM:
                    try:
                        peer = sock.getpeername()
                    except OSError:
                        continue
                    if peer == client_end:
                        served.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        assert served and all(served), served
    finally:
        conn.close()


def test_pod_check_names_the_attachment_and_its_problems(server: RestServer) -> None:
    status, _, body = request(server, "/v1/pods/c1/check")
    assert status == 200
    answer = json.loads(body)
    assert answer["containerId"] == "c1" and answer["ifname"] == "eth0"
    assert answer["ok"] is False and answer["problems"] == ["netns /run/netns/x is gone"]
    status, _, body = request(server, "/v1/pods/c1/check?ifname=eth0")
    assert status == 200


def test_pod_check_unknown_attachment_or_parameter(server: RestServer) -> None:
    status, _, body = request(server, "/v1/pods/c1/check?ifname=net1")
    assert status == 404 and "c1/net1" in json.loads(body)["error"]
    status, _, body = request(server, "/v1/pods/c1/check?verbose=1")
    assert status == 400 and "verbose" in json.loads(body)["error"]
    status, _, _ = request(server, "/v1/pods/c1/check", method="POST")
    assert status == 405


def test_pod_policy_shown_404_for_none_503_when_off(source: Source, server: RestServer) -> None:
    shown = get_json(server, "/v1/policy/web/db-0")
    assert shown["pod"] == "web/db-0" and shown["attachments"][0]["ingress"]["isolated"]
    assert "web/other" in get_json(server, "/v1/policy/web/other", 404)["error"]
    assert "verbose" in get_json(server, "/v1/policy/web/db-0?verbose=1", 400)["error"]
    source.policy_on = False
    assert "NetworkPolicy is off" in get_json(server, "/v1/policy/web/db-0", 503)["error"]

"""Only the pod's own node is exempt from NetworkPolicy (issue #39, item 1): two nodes of the
one-machine cluster (testbed/cluster.py), each agent reading a real kube-apiserver as the
shipped ClusterRole's user, through a relay on the fabric (the agents live in their node
namespaces). Once with the kernel dataplane, and with `Dataplane: vpp` on real VPPs and
`ServiceTranslation: vpp` (the shipped config map's) once per mesh: Linux's VXLAN (the
default), VPP's own VXLAN (`VXLANOwner: vpp`) and VPP's own WireGuard. Skipped without a
kube-apiserver (VSWITCH_TEST_KUBE_APISERVER), the VPP cases also without real VPPs
(tests/helpers/vpp_nodes).

No kubelet runs: the test creates the Node objects, and each pod's object with its labels and
its status IP once the real plugin ADDed it.

Test plan (TCP and UDP on IPv4; the pod to pod probes in IPv6 too):
- pod `db` on node 1 is ingress-isolated: TCP 8080 and UDP 5353 from pods labelled app=web;
- `web` on node 2 reaches it, `other` on node 2 does not; node 1's own network namespace (its
  kubelet) does; node 2's (a hostNetwork pod there, or any process of that node) does not;
- a second policy with an ipBlock covering node 2's addresses (its node IP, its VXLAN address
and its end of the VPP-host interconnect: the source of its host traffic to another node's
  pods is the address of the way out, which depends on the mesh): node 2's host connects;
- VPP: a NodePort Service whose only endpoint is `db`: through its ClusterIP and through node
  2's own address and nodePort, `web` connects and `other` does not (cnat on node 2 keeps the
  client's address up to node 1, whose ACL judges it). The kernel dataplane leaves Services to
  kube-proxy, which does not run here (the k8s tier covers it).
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from testbed.cluster import FABRIC_IP, Cluster, Node, Pod, converged, wait_for
from testbed.kube import KubeApiServer
from testbed.netns import entered
from testbed.tcpproxy import TcpProxy
from tests.helpers.vpp_nodes import REAL_VPP, VppNodes
from tests.kube.conftest import USER, kube_etcd, needs_apiserver, start_apiserver  # noqa: F401
from tests.nftpolicy.probes import Probe, reach, servers

pytestmark = [needs_apiserver, pytest.mark.timeout(600)]
RELAY_PORT = 6443
TCP_PORT, UDP_PORT = 8080, 5353
NODE_PORTS = (30080, 30053)  # TCP, UDP
WITHIN = 30.0  # seconds; a bound for waits, not a speed assertion


@pytest.fixture(scope="module")
def apiserver(kube_etcd: Any) -> Iterator[KubeApiServer]:  # noqa: F811
    api = start_apiserver(kube_etcd, sans=(f"IP:{FABRIC_IP}",))
    try:
        yield api
    finally:
        api.close()


@contextmanager
def relay(api: KubeApiServer, fabric: str) -> Iterator[None]:
    """The API server (on this namespace's loopback) at FABRIC_IP:RELAY_PORT in the fabric."""
    with entered(f"/var/run/netns/{fabric}"):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((FABRIC_IP, RELAY_PORT))
    listener.listen(64)
    with TcpProxy(api.port, listener=listener):
        yield


MESHES: dict[str, dict[str, Any]] = {
    "kernel": {},
    "vpp": {"Dataplane": "vpp", "ServiceTranslation": "vpp"},
    "vpp-own-vxlan": {"Dataplane": "vpp", "ServiceTranslation": "vpp", "VXLANOwner": "vpp"},
    "vpp-own-wireguard": {"Dataplane": "vpp", "ServiceTranslation": "vpp", "VXLANOwner": "vpp",
                          "Encryption": "wireguard"},
}


@contextmanager
def two_nodes(api: KubeApiServer, tmp_path: Path, mesh: str) -> Iterator[list[Node]]:
    config: dict[str, Any] = {
        "KubeConfig": str(api.kubeconfig(USER, RELAY_PORT, FABRIC_IP)), **MESHES[mesh]}
    with Cluster(tmp_path, config) as cluster, relay(api, cluster.fabric):
        vpps = VppNodes(cluster, real=True) if mesh != "kernel" else None
        try:
            nodes = [vpps.add_node() if vpps else cluster.add_node() for _ in range(2)]
            yield nodes
        finally:
            cluster.close()  # pods deleted and agents stopped while their VPPs still run
            if vpps is not None:
                vpps.close()


def eventually(what: str, check: Callable[[], bool]) -> None:
    wait_for(check, WITHIN, what)


class Objects:
    """What the test creates in the API (namespace `default`: the testbed's pods are there),
    deleted when the test ends."""

    def __init__(self, api: KubeApiServer, stack: ExitStack) -> None:
        self.api = api
        self.stack = stack

    def make(self, collection: str, body: dict[str, Any]) -> dict[str, Any]:
        made = self.api.must("POST", collection, body)
        path = f"{collection}/{made['metadata']['name']}"
        self.stack.callback(self.api.request, "DELETE", path)
        return dict(made)

    def node(self, node: Node) -> None:
        self.make("/api/v1/nodes", {"metadata": {"name": node.name}, "status": {
            "addresses": [{"type": "InternalIP", "address": node.node_ip}]}})

    def pod(self, pod: Pod, labels: dict[str, str]) -> None:
        """The kubelet's part: the object, then the status IPs from the ADD's result."""
        self.make("/api/v1/namespaces/default/pods", {
            "metadata": {"name": pod.name, "labels": labels},
            "spec": {"nodeName": pod.node.name, "containers": [{"name": "c", "image": "none"}]}})
        self.api.must("PATCH", f"/api/v1/namespaces/default/pods/{pod.name}/status",
                      {"status": {"podIP": pod.ips[0], "podIPs": [{"ip": a} for a in pod.ips],
                                  "phase": "Running"}},
                      content_type="application/merge-patch+json")

    def policy(self, name: str, ingress: list[dict[str, Any]]) -> None:
        self.make("/apis/networking.k8s.io/v1/namespaces/default/networkpolicies", {
            "metadata": {"name": name},
            "spec": {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"],
                     "ingress": ingress}})


PORTS = [{"port": TCP_PORT, "protocol": "TCP"}, {"port": UDP_PORT, "protocol": "UDP"}]


def both(src: str, addr: str, tcp: int = TCP_PORT, udp: int = UDP_PORT) -> list[Probe]:
    return [Probe(src, "tcp", addr, tcp), Probe(src, "udp", addr, udp)]


def host(node: Node) -> str:
    return f"/var/run/netns/{node.netns}"


def own_addresses(node: Node) -> list[str]:
    """Where the node's host traffic to another node's pods may come from: its node IP (VPP's
    own VXLAN), its VXLAN address (Linux's VXLAN device) or its end of the VPP-host
    interconnect (VPP's own WireGuard: Linux sends it through VPP)."""
    me = node.node_id()
    return [node.node_ip, f"192.168.30.{me}", f"172.30.{me}.2"]


REAL = [pytest.mark.vpp, pytest.mark.skipif(
    not REAL_VPP, reason="VSWITCH_TEST_VPP_START, VSWITCH_TEST_VPP_STOP and "
    "VSWITCH_TEST_VPP_MESH_SOCKET are not set (no real VPPs to start)")]


@pytest.mark.parametrize("mesh", [
    "kernel", *(pytest.param(m, marks=REAL) for m in MESHES if m != "kernel")])
def test_only_the_pods_own_node_is_exempt(apiserver: KubeApiServer, tmp_path: Path,
                                          mesh: str) -> None:
    with two_nodes(apiserver, tmp_path, mesh) as (n1, n2), ExitStack() as stack:
        made = Objects(apiserver, stack)
        for node in (n1, n2):
            made.node(node)
        db, web, other = n1.add_pod(), n2.add_pod(), n2.add_pod()
        for pod, app in ((db, "db"), (web, "web"), (other, "other")):
            made.pod(pod, {"app": app})
        wait_for(lambda: converged([n1, n2]), 60, "the mesh of two nodes")
        made.policy("db", [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                            "ports": PORTS}])
        stack.enter_context(servers(db.netns, db.ips, [("tcp", TCP_PORT), ("udp", UDP_PORT)]))
        a4, a6 = db.ips
        want = {
            "web": (both(web.netns, a4) + both(web.netns, a6), True),
            "other": (both(other.netns, a4) + both(other.netns, a6), False),
            "node 1": (both(host(n1), a4), True),
            "node 2": (both(host(n2), a4), False),
        }

        def wrong() -> list[str]:
            seen = {who: reach(probes) for who, (probes, _) in want.items()}
            return [f"{who}: {seen[who]}" for who, (probes, allowed) in want.items()
                    if seen[who] != [allowed] * len(probes)]

        deadline = time.monotonic() + WITHIN
        while (bad := wrong()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert bad == [], "db isolated: web and node 1 in, other and node 2 out"

        # an ipBlock covering node 2's addresses lets its host in
        blocks = [{"ipBlock": {"cidr": f"{a}/32"}} for a in own_addresses(n2)]
        made.policy("nodes", [{"from": blocks, "ports": PORTS}])
        eventually("node 2 allowed by an ipBlock", lambda: all(reach(both(host(n2), a4))))
        assert reach(both(other.netns, a4)) == [False, False]

        if mesh != "kernel":
            check_services(made, n2, web, other, db)


def check_services(made: Objects, n2: Node, web: Pod, other: Pod, db: Pod) -> None:
    """A NodePort Service with `db` its only endpoint, reached from node 2's pods."""
    service = made.make("/api/v1/namespaces/default/services", {
        "metadata": {"name": "db"},
        "spec": {"type": "NodePort", "ports": [
            {"name": "tcp", "port": 80, "targetPort": TCP_PORT, "protocol": "TCP",
             "nodePort": NODE_PORTS[0]},
            {"name": "udp", "port": 53, "targetPort": UDP_PORT, "protocol": "UDP",
             "nodePort": NODE_PORTS[1]}]}})
    made.make("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", {
        "metadata": {"name": "db-1", "labels": {"kubernetes.io/service-name": "db"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [db.ips[0]], "conditions": {"ready": True},
                       "nodeName": db.node.name}],
        "ports": [{"name": "tcp", "port": TCP_PORT, "protocol": "TCP"},
                  {"name": "udp", "port": UDP_PORT, "protocol": "UDP"}]})
    vip = str(ipaddress.ip_address(service["spec"]["clusterIP"]))
    allowed = both(web.netns, vip, 80, 53) + both(web.netns, n2.node_ip, *NODE_PORTS)
    denied = both(other.netns, vip, 80, 53) + both(other.netns, n2.node_ip, *NODE_PORTS)
    eventually("the Service translated on node 2",
               lambda: reach(allowed) == [True] * len(allowed))
    assert reach(denied) == [False] * len(denied)

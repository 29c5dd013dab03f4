"""VPP's main heap under the agent's full configuration, for each shipped overlay's startup config
(issue #40): skipped unless VSWITCH_TEST_VPP_BINARY names a VPP 26.06 `vpp` executable and
VSWITCH_TEST_KUBE_APISERVER a kube-apiserver.

Per overlay (k8s/overlays/vpp, k8s/overlays/vpp-hugepages), VPP starts from its `vpp.conf` as
kustomize renders it (tests/helpers/shipped_vpp: only the sockets' directory and the API
segment's prefix are the test's). The overlay's heap must hold a full node:
- the agent with `Dataplane: vpp` and `ServiceTranslation: vpp` (cnat), NetworkPolicy in the acl
  plugin, reading a real kube-apiserver as the shipped ClusterRole's user;
- 110 pods (the kubelet's default maxPods) ADDed by the real plugin, in 10 apps;
- 10 Services (TCP and UDP), one per app, with the app's pods as endpoints, translated by cnat;
- default-deny ingress in the namespace and, per app, ingress allowed from the next app's pods
  on the Services' target ports;
- every pod opens a TCP connection and sends a UDP datagram through the Service it is allowed
  to reach (cnat sessions and acl sessions made in VPP), and a few denied probes stay denied.
Then the heap (`/mem/main heap` in VPP's stats segment) keeps at least 25 % free, VPP is still
running and its log has no out-of-memory line. The figures are printed (`-s`): docs/vpp.md's
sizing table comes from them.

A third case runs the `vpp` overlay's config with one VPP worker thread (`corelist-workers 1`):
the same configuration and traffic through a worker, and the acl plugin's session pool once per
thread.

The hugepages overlay needs 2 MiB pages free (`HugePages_Free` in /proc/meminfo); without them
its case skips, naming how many.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from testbed.agent import AgentHandle, running_agent
from testbed.cluster import wait_for
from testbed.kube import KubeApiServer
from testbed.vpp import VppProbe
from tests.helpers.kubelet import Pods
from tests.helpers.shipped_vpp import (
    BINARY,
    BINARY_ENV,
    ShippedVpp,
    hugepages_free,
    hugepages_needed,
    shipped_config,
    with_worker,
)
from tests.kube.conftest import USER, apiserver, kube_etcd, needs_apiserver  # noqa: F401
from tests.nftpolicy.probes import Probe, reach, servers
from tests.rest.test_metrics_scrape import scrape

pytestmark = [
    pytest.mark.vpp, needs_apiserver, pytest.mark.timeout(900),
    pytest.mark.skipif(not BINARY, reason=f"{BINARY_ENV} is not set (no VPP executable)"),
]
PODS = 110  # the kubelet's default maxPods
APPS = 10
SUBNET = "10.236.0.0/16"
TCP_PORT, UDP_PORT = 8080, 5353
HEADROOM = 0.25
WITHIN = 60.0  # seconds; a bound for waits, not a speed assertion
MiB = 2**20


def app(i: int) -> str:
    return f"a{i % APPS}"


def allow_from_next(k: int) -> dict[str, Any]:
    """Pods of app k take the Services' ports from app k+1's pods only."""
    return {"metadata": {"name": f"allow-a{k}"},
            "spec": {"podSelector": {"matchLabels": {"app": f"a{k}"}},
                     "ingress": [{"from": [{"podSelector": {"matchLabels": {
                         "app": f"a{(k + 1) % APPS}"}}}],
                                  "ports": [{"port": TCP_PORT},
                                            {"port": UDP_PORT, "protocol": "UDP"}]}]}}


def slice_of(k: int, ips: list[str]) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"svc-a{k}-1", "labels": {"kubernetes.io/service-name":
                                                           f"svc-a{k}"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips],
            "ports": [{"name": "tcp", "port": TCP_PORT, "protocol": "TCP"},
                      {"name": "udp", "port": UDP_PORT, "protocol": "UDP"}]}


class Node(Pods):
    """The test as kubelet (its namespace is the node's name: each case's own, the last one's
    may still be going): a pod object, its ADD and its status IP in one step."""

    def add_pod(self, i: int) -> None:
        self.create(f"p{i}", {"app": app(i)})
        self.add(f"p{i}")
        self.report_ip(f"p{i}")


@pytest.fixture(params=["vpp", "vpp-hugepages", "vpp+worker"])
def vpp(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ShippedVpp]:
    overlay, _, worker = request.param.partition("+")
    conf = shipped_config(overlay)
    if worker:  # the overlay's config with one VPP worker thread (docs/vpp.md, "Workers")
        conf = with_worker(conf)
    need = hugepages_needed(conf)
    if need > hugepages_free():
        pytest.skip(f"k8s/overlays/{request.param} maps VPP on 2 MiB pages: {need} must be "
                    f"free, {hugepages_free()} are (echo {need} > /proc/sys/vm/nr_hugepages)")
    with ShippedVpp(conf, tmp_path) as running:
        yield running
    assert "Out-of-memory" not in running.log(), running.log()[-4000:]


@pytest.fixture
def node(apiserver: KubeApiServer, etcd_endpoints: list[str], tmp_path: Path,  # noqa: F811
         vpp: ShippedVpp) -> Iterator[Node]:
    suffix = secrets.token_hex(2)
    name = f"heap-{suffix}"
    apiserver.must("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    try:
        (tmp_path / "agent").mkdir()
        with running_agent(tmp_path / "agent", etcd_endpoints, pod_subnet=SUBNET,
                           node_name=name, wait=60, extra_config={
                               "Dataplane": "vpp", "ServiceTranslation": "vpp",
                               "KubeConfig": str(apiserver.kubeconfig(USER)),
                               "VPPAPISocket": vpp.api_socket, "UseTAPInterfaces": False,
                               "VPPHostInterface": f"vsh{suffix}h",
                               "VPPHostPeerInterface": f"vsh{suffix}v"}) as agent, \
                ExitStack() as stack:
            yield Node(apiserver, agent, name, stack, name)
    finally:
        apiserver.request("DELETE", f"/api/v1/namespaces/{name}")


def gauges(agent: AgentHandle) -> tuple[float, float] | None:
    """The agent's vswitch_cni_vpp_main_heap_{used,size}_bytes; None before its first read."""
    _, samples, _ = scrape(agent)
    used = samples.get("vswitch_cni_vpp_main_heap_used_bytes", [])
    size = samples.get("vswitch_cni_vpp_main_heap_size_bytes", [])
    return (used[0].value, size[0].value) if used and size else None


def test_the_shipped_heap_holds_a_full_node(node: Node, vpp: ShippedVpp,
                                            apiserver: KubeApiServer) -> None:  # noqa: F811
    probe = VppProbe(vpp.api_socket)
    node.stack.callback(probe.close)
    base = probe.heap_used()  # `show memory main-heap`: at once (the stats segment lags 10 s)
    api = apiserver
    api.must("POST", f"/apis/networking.k8s.io/v1/namespaces/{node.namespace}/networkpolicies",
             {"metadata": {"name": "deny-in"}, "spec": {"podSelector": {},
                                                         "policyTypes": ["Ingress"]}})
    for k in range(APPS):
        api.must("POST", f"/apis/networking.k8s.io/v1/namespaces/{node.namespace}/networkpolicies",
                 allow_from_next(k))
    vips = {}
    for k in range(APPS):
        svc = api.must("POST", f"/api/v1/namespaces/{node.namespace}/services", {
            "metadata": {"name": f"svc-a{k}"},
            "spec": {"ports": [{"name": "tcp", "port": 80, "targetPort": TCP_PORT},
                               {"name": "udp", "port": 53, "targetPort": UDP_PORT,
                                "protocol": "UDP"}]}})
        vips[k] = svc["spec"]["clusterIP"]

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(node.add_pod, range(PODS)))
    for k in range(APPS):
        api.must("POST", f"/apis/discovery.k8s.io/v1/namespaces/{node.namespace}/endpointslices",
                 slice_of(k, [node.ip[f"p{i}"] for i in range(PODS) if i % APPS == k]))
    configured = probe.heap_used()

    with ExitStack() as serving:
        for i in range(PODS):
            serving.enter_context(servers(node.netns[f"p{i}"], [node.ip[f"p{i}"]],
                                          [("tcp", TCP_PORT), ("udp", UDP_PORT)]))
        # app m reaches svc-a(m-1) (its pods allow app m), never svc-a(m+1)
        allowed = [Probe(node.netns[f"p{i}"], proto, vips[(i - 1) % APPS], port)
                   for i in range(PODS) for proto, port in (("tcp", 80), ("udp", 53))]
        denied = [Probe(node.netns[f"p{i}"], "tcp", vips[(i + 1) % APPS], 80)
                  for i in range(APPS)]
        wait_for(lambda: vpp.running() and all(reach(allowed[:2 * APPS])), WITHIN,
                 "every pod reaches the Service its policy allows")
        results = reach(allowed)
        assert all(results), [p for p, ok in zip(allowed, results, strict=True) if not ok]
        assert not any(reach(denied))
    used = probe.heap_used()
    # the agent's gauges: the heap's size as configured, its use as VPP's stats segment said
    # (refreshed every 10 s by VPP, read every 10 s by the agent)
    wait_for(lambda: (g := gauges(node.agent)) is not None and g[0] >= 0.9 * used, WITHIN,
             "the agent's heap gauges follow")
    reading = gauges(node.agent)
    assert reading is not None
    total = int(reading[1])
    assert total == vpp.heap_size()

    print(f"\nheap {total / MiB:.0f} MiB: agent ready {base / MiB:.1f} MiB, "
          f"{PODS} pods + policies + Services {configured / MiB:.1f} MiB "
          f"({(configured - base) / PODS / 1024:.1f} KiB per pod), after traffic "
          f"{used / MiB:.1f} MiB; free {1 - used / total:.0%}")
    assert vpp.running()
    assert used <= (1 - HEADROOM) * total, (
        f"VPP's main heap is {used / total:.0%} used ({used / MiB:.1f} of "
        f"{total / MiB:.0f} MiB) with {PODS} pods: less than {HEADROOM:.0%} free")

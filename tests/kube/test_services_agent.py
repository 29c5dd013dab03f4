"""ClusterIP translation end to end: a real kube-apiserver, the agent process with `Dataplane:
vpp` and `ServiceTranslation: vpp` reading it as the shipped ClusterRole's user, the fake VPP
(CI has no VPP; tests/vpp/test_cnat_real_vpp.py has the traffic on a real one).

Test plan (the test plays the EndpointSlice controller: no controller-manager runs here):
- a Service (ClusterIP allocated by the server, a TCP and a UDP port with named target ports,
  an SCTP port) and its IPv4 slice (one ready endpoint, one not ready) become one translation
  per TCP/UDP port in VPP, to the ready endpoint's slice port; SCTP is left to kube-proxy;
  a pod ADDed meanwhile gets cnat on its interface once; cnat's hairpin SNAT is the pod
  subnet's reserved last address;
- the second endpoint turns ready: the translations follow in a bounded time;
- a headless Service and a Service without a slice get none; the slice deleted: the Service's
  translations are deleted (kube-proxy's again);
- VPP restarts under the agent: its translations are made again, without an agent restart.
"""

from __future__ import annotations

import ipaddress
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from testbed.agent import AgentHandle, net_config, run_plugin, running_agent
from testbed.kube import KubeApiServer
from testbed.netns import named_netns
from tests.fakevpp import API_DIR, FakeVPP
from tests.kube.conftest import USER, needs_apiserver
from tests.vpp.conftest import serving_fake

pytestmark = [needs_apiserver, pytest.mark.timeout(300)]
NS = "svc"
SUBNET = "10.238.0.0/16"
WITHIN = 20.0  # seconds; a bound for waits, not a speed assertion
Held = dict[tuple[str, int, int], list[tuple[str, int]]]


def eventually(what: str, check: Callable[[], bool], timeout: float = WITHIN) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        time.sleep(0.1)


def held(fake: FakeVPP) -> Held:
    """{(VIP, port, IP protocol): [(backend, port), ...]} as the fake VPP holds them."""
    return {(str(t["vip"]["addr"]), t["vip"]["port"], t["ip_proto"]):
            sorted((str(p["dst_ep"]["addr"]), p["dst_ep"]["port"]) for p in t["paths"])
            for t in fake.cnat().translations.values()}


def endpoint_slice(name: str, service: str, ready: list[bool]) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [f"10.238.9.{i + 10}"], "conditions": {"ready": r}}
                          for i, r in enumerate(ready)],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                      {"name": "dns", "port": 5353, "protocol": "UDP"},
                      {"name": "sctp", "port": 9999, "protocol": "SCTP"}]}


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeVPP]:
    with serving_fake(str(tmp_path), tap_works=False) as vpp:
        yield vpp


@pytest.fixture
def agent(apiserver: KubeApiServer, etcd_endpoints: list[str], tmp_path: Path,
          fake: FakeVPP) -> Iterator[AgentHandle]:
    suffix = secrets.token_hex(2)
    apiserver.must("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
    try:
        with running_agent(tmp_path, etcd_endpoints, pod_subnet=SUBNET,
                           node_name=f"svcnode-{suffix}", extra_config={
                               "Dataplane": "vpp", "ServiceTranslation": "vpp",
                               "KubeConfig": str(apiserver.kubeconfig(USER)),
                               "VPPAPISocket": fake.socket_path, "VPPAPIDir": API_DIR,
                               "UseTAPInterfaces": False, "VPPHostInterface": f"vss{suffix}h",
                               "VPPHostPeerInterface": f"vss{suffix}v"}) as handle:
            yield handle
    finally:
        apiserver.request("DELETE", f"/api/v1/namespaces/{NS}")


def test_services_and_slices_become_cnat_translations(
        apiserver: KubeApiServer, agent: AgentHandle, fake: FakeVPP) -> None:
    web = apiserver.must("POST", f"/api/v1/namespaces/{NS}/services", {
        "metadata": {"name": "web"},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": "http"},
                           {"name": "dns", "port": 53, "protocol": "UDP"},
                           {"name": "sctp", "port": 99, "protocol": "SCTP"}]}})
    vip = web["spec"]["clusterIP"]
    assert ipaddress.ip_address(vip) in ipaddress.ip_network("10.96.0.0/16")
    apiserver.must("POST", f"/api/v1/namespaces/{NS}/services",
                   {"metadata": {"name": "headless"},
                    "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80}]}})
    lonely = apiserver.must("POST", f"/api/v1/namespaces/{NS}/services",
                            {"metadata": {"name": "lonely"},
                             "spec": {"ports": [{"name": "http", "port": 80}]}})
    apiserver.must("POST", f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices",
                   endpoint_slice("web-1", "web", [True, False]))
    apiserver.must("POST", f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices",
                   endpoint_slice("headless-1", "headless", [True]))
    want = {(vip, 80, 6): [("10.238.9.10", 8080)], (vip, 53, 17): [("10.238.9.10", 5353)]}
    eventually("the Service's TCP and UDP ports translated", lambda: held(fake) == want)
    assert all(k[0] != lonely["spec"]["clusterIP"] for k in held(fake))
    snat = fake.cnat().snat
    assert snat["ip4"] is not None and ipaddress.ip_address(snat["ip4"]) in \
        ipaddress.ip_network(SUBNET)

    with ExitStack() as stack:  # a pod: cnat on its interface, once
        netns = stack.enter_context(named_netns("tsvc"))
        added = run_plugin("ADD", net_config(agent), container_id="c-svc-1", netns=netns,
                           args=f"K8S_POD_NAMESPACE={NS};K8S_POD_NAME=client")
        assert added.returncode == 0, added.stderr + added.stdout
        stack.callback(run_plugin, "DEL", net_config(agent), container_id="c-svc-1",
                       netns=netns)
        pods = [sw for sw, n in fake.cnat().features.items() if n]
        assert len(pods) == 2 and all(n == 1 for n in fake.cnat().features.values())  # + host

        apiserver.must("PUT", f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/web-1",
                       endpoint_slice("web-1", "web", [True, True]))
        both = [("10.238.9.10", 8080), ("10.238.9.11", 8080)]
        eventually("the second endpoint, ready, joins",
                   lambda: held(fake).get((vip, 80, 6)) == both)

        fake.restart()  # VPP restarts: the agent notices, reconnects, makes them all again
        eventually("the translations are back after the VPP restart",
                   lambda: held(fake).get((vip, 80, 6)) == both, timeout=40.0)

        apiserver.must("DELETE", f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/web-1")
        eventually("no slice, no translation: kube-proxy's again", lambda: held(fake) == {})

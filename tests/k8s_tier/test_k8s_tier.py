"""The k8s tier: the project deployed on a real Kubernetes node, carrying real pods' traffic.

Skipped unless VSWITCH_TEST_KUBECONFIG names a cluster (see conftest.py and docs/k8s-tier.md).
Plan, run once with `Dataplane: kernel` and once more with `Dataplane: vpp` (veth + AF_PACKET)
when VSWITCH_TEST_VPP_SOCKET names a VPP on the node:
- k8s/base deployed with the node's config: etcd and the agent DaemonSet roll out, the init
  container installs the plugin, and a Deployment of 3 agnhost pods gets addresses from the
  agent, wired by the dataplane under test (the agent's /v1/pods: a VPP interface per pod, or none);
- pods reach each other over TCP (HTTP, every ordered pair);
- a ClusterIP Service from every pod and from the node; a NodePort from a pod and from the node;
  every answer comes from one of the Deployment's pods;
- hairpin: a pod calling a Service whose only backend is itself gets its own answer;
- pods reach the node: the node IP and the `kubernetes` Service (the apiserver);
- egress: a pod reaches an outside namespace that has no route to the pod subnets, and the
  outside sees the node's address (the agent's NatExternalTraffic);
- addresses: the agent's REST lists every pod's address while it runs and none after the pods
  are deleted (last: it scales the Deployment to zero).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from testbed.traffic import Server
from tests.k8s_tier.conftest import KUBECONFIG
from tests.k8s_tier.deploy import APP, NAMESPACE
from tests.k8s_tier.kube import wait_for
from tests.k8s_tier.tier import OUTSIDE_IP, OUTSIDE_NODE_IP, Tier

pytestmark = [
    pytest.mark.k8s,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not KUBECONFIG,
                       reason="VSWITCH_TEST_KUBECONFIG is not set (no Kubernetes cluster)"),
]
APISERVER_SERVICE = "10.96.0.1"  # the first address of the Service range: `kubernetes`
OUTSIDE_PORT = 18080


def test_pods_are_wired_by_the_dataplane_under_test(tier: Tier) -> None:
    records = {r["pod_name"]: r for r in tier.pod_records()}
    assert set(records) == set(tier.pods)
    for name, record in records.items():
        assert record["addresses"] == [f"{tier.pods[name]}/32"]
        extra = record["wiring"]["extra"]
        if tier.dataplane == "vpp":  # a VPP interface on the pod's veth (AF_PACKET)
            assert extra["mode"] == "veth-afpacket" and int(extra["sw_if_index"]) > 0, record
        else:
            assert "sw_if_index" not in extra, record


def test_pods_reach_each_other_over_tcp(tier: Tier) -> None:
    for client in tier.pods:
        for server, address in tier.pods.items():
            if server != client:
                assert tier.from_pod(client, address) == server


def test_cluster_ip_from_every_pod(tier: Tier) -> None:
    for client in tier.pods:
        assert tier.from_pod(client, tier.cluster_ip, 80) in tier.pods


def test_cluster_ip_from_the_node(tier: Tier) -> None:
    answers = {tier.from_node(tier.cluster_ip, 80) for _ in range(6)}
    assert answers and answers <= set(tier.pods)


def test_node_port_from_a_pod(tier: Tier) -> None:
    for client in tier.pods:
        assert tier.from_pod(client, tier.node_ip, tier.node_port) in tier.pods


def test_node_port_from_the_node(tier: Tier) -> None:
    assert tier.from_node(tier.node_ip, tier.node_port) in tier.pods


def test_hairpin_a_pod_reaches_itself_through_its_service(tier: Tier) -> None:
    assert tier.from_pod(tier.hairpin_pod, tier.hairpin_ip, 80) == tier.hairpin_pod


def test_pods_reach_the_node_and_the_apiserver(tier: Tier) -> None:
    for client in tier.pods:
        tier.pod_connects(client, tier.node_ip, 6443)
        tier.pod_connects(client, APISERVER_SERVICE, 443)


def test_egress_to_an_outside_network_leaves_with_the_node_address(
    tier: Tier, outside: str
) -> None:
    pod_address = next(iter(tier.pods.values()))
    # The check means something only if the outside cannot answer a pod address by itself.
    route = subprocess.run(["ip", "-n", os.path.basename(outside), "route", "get", pod_address],
                           capture_output=True, text=True, check=False)
    assert route.returncode != 0, f"the outside namespace routes pods: {route.stdout}"
    with Server(outside, "tcp", OUTSIDE_IP, OUTSIDE_PORT):
        for client in tier.pods:
            answer = tier.kube.exec(NAMESPACE, client,
                                    f"printf hello | nc -w 5 {OUTSIDE_IP} {OUTSIDE_PORT}")
            seen_as, received, _ = answer.split()
            assert (seen_as, received) == (OUTSIDE_NODE_IP, "5"), answer


def test_addresses_released_when_pods_are_deleted(tier: Tier) -> None:
    held = tier.allocations()
    for name, address in tier.pods.items():
        assert held.get(address, {}).get("pod") == f"{NAMESPACE}/{name}", held
    tier.kube.run("scale", f"--namespace={NAMESPACE}", f"deployment/{APP}", "--replicas=0")
    wait_for("the pods to be deleted", lambda: not tier.kube.get(
        "pods", namespace=NAMESPACE, selector=f"app={APP}")["items"])

    def released() -> bool:
        return not set(tier.pods.values()) & set(tier.allocations())

    wait_for("the agent to release the pods' addresses", released, timeout=60)

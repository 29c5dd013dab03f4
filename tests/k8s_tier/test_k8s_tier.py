"""The k8s tier: the project deployed on a real Kubernetes cluster, carrying real pods' traffic.

Skipped unless VSWITCH_TEST_KUBECONFIG names a cluster (see conftest.py and docs/k8s-tier.md).
Plan, run once with `Dataplane: kernel` and once more with `Dataplane: vpp` (veth + AF_PACKET)
when VSWITCH_TEST_VPP_SOCKET names a VPP on the node(s); on one node, or on two when
VSWITCH_TEST_K8S_NODE2_NETNS names the second (the checks marked "two nodes" skip without it):
- k8s/base deployed with the nodes' config: etcd and the agent DaemonSet roll out on every node,
  each agent sees every node in its registry and has programmed the mesh to the others; a
  Deployment of 4 agnhost pods, spread over the nodes, gets addresses from the agents, wired by
  the dataplane under test (the agents' /v1/pods: a VPP interface per pod, or none);
- pods reach each other over TCP (HTTP) and UDP, every ordered pair, so across nodes too;
- a ClusterIP Service from every pod and from every node; a NodePort from every pod and from
  every node, at every node's IP; every answer comes from one of the Deployment's pods;
- two nodes: Services whose backends are all on the other node, ClusterIP and NodePort, from
  that node's pods and from the node itself;
- hairpin: on every node, a pod calling a Service whose only backend is itself gets its own answer;
- pods reach their node (the kubelet's port), the apiserver's node IP and the `kubernetes` Service;
- egress: every pod reaches an outside namespace that has no route to the pod subnets, and the
  outside sees the address of the pod's node (the agent's NatExternalTraffic);
- two nodes: a rolling update of the agent DaemonSet under live TCP traffic between pods on the
  two nodes, both ways: no established connection lost, every new connection answered (the
  counts are printed);
- addresses: each agent's REST lists its pods' addresses while they run and none after the pods
  are deleted (the Deployment scaled to zero);
- two nodes, last: the second node drained (its pods come back on the first and answer) and its
  Node deleted: once its agent is gone and NodeRemovalGrace has passed, the agents free its ID
  and subnet by themselves (they read Nodes from the API) and the first node drops its mesh to
  it. The Node is created again afterwards and the agent returns to it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from functools import partial
from typing import Any

import pytest

from testbed.traffic import Server
from tests.k8s_tier import deploy
from tests.k8s_tier.conftest import KUBECONFIG, NEEDS_TWO_NODES
from tests.k8s_tier.deploy import APP, NAMESPACE, PORT, REPLICAS
from tests.k8s_tier.flows import Flows
from tests.k8s_tier.kube import Doc, Kube, wait_for
from tests.k8s_tier.tier import NC, OUTSIDE_IP, Node, Pod, Tier, outside_addresses

pytestmark = [
    pytest.mark.k8s,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(not KUBECONFIG,
                       reason="VSWITCH_TEST_KUBECONFIG is not set (no Kubernetes cluster)"),
]
APISERVER_SERVICE = "10.96.0.1"  # the first address of the Service range: `kubernetes`
APISERVER_PORT = 6443  # on the first node (tests/k8s_tier/node-up.sh)
KUBELET_PORT = 10250  # on every node
OUTSIDE_PORT = 18080
AGENTS = "app=vswitch-agent"
AGENT_CONFIG = "/etc/vswitch-cni/agent.yaml"  # in the agent's container (k8s/base)


def test_the_agent_runs_on_every_node_and_meshes_them(tier: Tier) -> None:
    agents = tier.kube.get("pods", namespace="kube-system", selector=AGENTS)["items"]
    assert {n.name for n in tier.nodes} <= {p["spec"]["nodeName"] for p in agents}
    for node in tier.nodes:
        wait_for(f"{node.name}'s mesh to the other nodes", partial(_meshed, node, tier.nodes), 60)


def _meshed(node: Node, nodes: list[Node]) -> bool:
    """`node`'s agent has programmed its mesh to every other node of `nodes`."""
    expected = {n.name: "local" if n == node else "programmed" for n in nodes}
    view = node.agent("/v1/nodes")["nodes"]
    return {e["name"]: e["mesh"]["state"] for e in view if e["name"] in expected} == expected


def test_pods_are_wired_by_the_dataplane_under_test(tier: Tier) -> None:
    for node in tier.nodes:
        records = {r["pod_name"]: r for r in tier.pod_records(node)}
        assert set(records) == set(tier.on(node))
        for name, record in records.items():
            assert record["addresses"] == [f"{tier.pods[name].ip}/32"]
            extra = record["wiring"]["extra"]
            if tier.dataplane == "vpp":  # a VPP interface on the pod's veth (AF_PACKET)
                assert extra["mode"] == "veth-afpacket" and int(extra["sw_if_index"]) > 0, record
            else:
                assert "sw_if_index" not in extra, record


@NEEDS_TWO_NODES
def test_the_workload_spans_both_nodes(tier: Tier) -> None:
    # The pair checks below cross nodes only if the pods do.
    assert all(tier.on(node) for node in tier.nodes), tier.pods


def test_pods_reach_each_other_over_tcp(tier: Tier) -> None:
    for client in tier.pods:
        for server, pod in tier.pods.items():
            if server != client:
                assert tier.from_pod(client, pod.ip) == server, (client, server)


def test_pods_reach_each_other_over_udp(tier: Tier) -> None:
    for client in tier.pods:
        for server, pod in tier.pods.items():
            if server != client:
                assert tier.udp_from_pod(client, pod.ip) == [server], (client, server)


def test_cluster_ip_from_every_pod(tier: Tier) -> None:
    for client in tier.pods:
        assert tier.from_pod(client, tier.cluster_ip, 80) in tier.pods


def test_cluster_ip_from_every_node(tier: Tier) -> None:
    for node in tier.nodes:
        answers = {node.get(tier.cluster_ip, 80) for _ in range(6)}
        assert answers and answers <= set(tier.pods), node.name


def test_node_port_from_every_pod(tier: Tier) -> None:
    for client in tier.pods:
        for node in tier.nodes:
            assert tier.from_pod(client, node.ip, tier.node_port) in tier.pods, (client, node)


def test_node_port_from_every_node(tier: Tier) -> None:
    for node in tier.nodes:
        for target in tier.nodes:
            assert node.get(target.ip, tier.node_port) in tier.pods, (node.name, target.name)


def _pairs(tier: Tier) -> list[tuple[Node, Node]]:
    """(node, the other node) both ways."""
    first, second = tier.nodes[:2]
    return [(first, second), (second, first)]


@NEEDS_TWO_NODES
def test_services_with_backends_on_the_other_node_from_pods(tier: Tier) -> None:
    for here, there in _pairs(tier):
        cluster_ip, node_port = tier.backends[there.name]
        remote = set(tier.on(there))
        for client in tier.on(here):
            assert tier.from_pod(client, cluster_ip, 80) in remote, (client, there.name)
            assert tier.from_pod(client, here.ip, node_port) in remote, (client, there.name)


@NEEDS_TWO_NODES
def test_services_with_backends_on_the_other_node_from_each_node(tier: Tier) -> None:
    for here, there in _pairs(tier):
        cluster_ip, node_port = tier.backends[there.name]
        remote = set(tier.on(there))
        assert {here.get(cluster_ip, 80) for _ in range(4)} <= remote, here.name
        for target in (here, there):
            assert here.get(target.ip, node_port) in remote, (here.name, target.name)


def test_hairpin_a_pod_reaches_itself_through_its_service(tier: Tier) -> None:
    assert set(tier.hairpin) == {n.name for n in tier.nodes if tier.on(n)}
    for service_ip, pod in tier.hairpin.values():
        assert tier.from_pod(pod, service_ip, 80) == pod


def test_pods_reach_their_node_and_the_apiserver(tier: Tier) -> None:
    by_name = {n.name: n for n in tier.nodes}
    for client, pod in tier.pods.items():
        tier.pod_connects(client, by_name[pod.node].ip, KUBELET_PORT)
        tier.pod_connects(client, tier.nodes[0].ip, APISERVER_PORT)
        tier.pod_connects(client, APISERVER_SERVICE, 443)


def test_egress_to_an_outside_network_leaves_with_the_node_address(
    tier: Tier, outside: str
) -> None:
    # The check means something only if the outside cannot answer a pod address by itself.
    for pod in tier.pods.values():
        route = subprocess.run(["ip", "-n", os.path.basename(outside), "route", "get", pod.ip],
                               capture_output=True, text=True, check=False)
        assert route.returncode != 0, f"the outside namespace routes pods: {route.stdout}"
    seen = {node.name: outside_addresses(i)[0] for i, node in enumerate(tier.nodes)}
    with Server(outside, "tcp", OUTSIDE_IP, OUTSIDE_PORT):
        for client, pod in tier.pods.items():
            answer = tier.kube.exec(NAMESPACE, client,
                                    f"printf hello | {NC} {OUTSIDE_IP} {OUTSIDE_PORT}")
            seen_as, received, _ = answer.split()
            assert (seen_as, received) == (seen[pod.node], "5"), (client, answer)


@NEEDS_TWO_NODES
def test_a_rolling_update_of_the_agent_keeps_established_connections(tier: Tier) -> None:
    first, second = tier.nodes[:2]
    a, b = tier.pods[tier.on(first)[0]], tier.pods[tier.on(second)[0]]
    before = _agent_pods(tier.kube)
    with Flows(tier.pod_netns(a.name), b.ip, PORT) as ab, \
            Flows(tier.pod_netns(b.name), a.ip, PORT) as ba:
        time.sleep(2)
        started = time.monotonic()
        tier.kube.run("rollout", "restart", "--namespace=kube-system", "daemonset/vswitch-agent")
        tier.kube.rollout("daemonset", "vswitch-agent", "kube-system")
        took = time.monotonic() - started
        time.sleep(3)  # and on after the update
        counts = {f"{first.name} -> {second.name}": ab.stop(),
                  f"{second.name} -> {first.name}": ba.stop()}
    after = _agent_pods(tier.kube)
    print(f"rolling update ({tier.dataplane}) took {took:.1f} s; traffic:",
          json.dumps(counts, indent=1))
    for node in tier.nodes:  # every node's agent was replaced
        assert before[node.name] != after[node.name], node.name
    for direction, c in counts.items():
        established, new = c["established"], c["new"]
        assert established["opened"] == ab.long, (direction, established)
        assert established["kept"] == established["opened"], (direction, established)
        assert new["attempted"] > 0 and new["succeeded"] == new["attempted"], (direction, new)


def _agent_pods(kube: Kube) -> dict[str, str]:
    """node name -> the UID of the agent pod there."""
    return {p["spec"]["nodeName"]: p["metadata"]["uid"]
            for p in kube.get("pods", namespace="kube-system", selector=AGENTS)["items"]}


def test_addresses_released_when_pods_are_deleted(tier: Tier) -> None:
    for node in tier.nodes:
        held = tier.allocations(node)
        for name in tier.on(node):
            assert held.get(tier.pods[name].ip, {}).get("pod") == f"{NAMESPACE}/{name}", held
    tier.kube.run("scale", f"--namespace={NAMESPACE}", f"deployment/{APP}", "--replicas=0")
    wait_for("the pods to be deleted", lambda: not _pods(tier.kube))

    def released() -> bool:
        addresses = {p.ip for p in tier.pods.values()}
        return not any(addresses & set(tier.allocations(node)) for node in tier.nodes)

    wait_for("the agents to release the pods' addresses", released, timeout=60)


def _pods(kube: Kube) -> dict[str, Pod]:
    return {p["metadata"]["name"]: Pod(p["metadata"]["name"], p["status"].get("podIP", ""),
                                       p["spec"].get("nodeName", ""))
            for p in kube.get("pods", namespace=NAMESPACE, selector=f"app={APP}")["items"]}


@NEEDS_TWO_NODES
def test_a_drained_and_deleted_node(tier: Tier) -> None:
    kube, (first, second) = tier.kube, tier.nodes[:2]
    kube.run("scale", f"--namespace={NAMESPACE}", f"deployment/{APP}", f"--replicas={REPLICAS}")
    kube.rollout("deployment", APP, NAMESPACE, timeout=180)
    drained = [p for p in _pods(kube).values() if p.node == second.name]
    assert drained, "no pod on the second node to drain"
    saved = kube.get("node", second.name)
    entry = _registry(first)[second.name]
    try:
        kube.run("drain", second.name, "--ignore-daemonsets", "--delete-emptydir-data",
                 "--timeout=120s", timeout=180)
        kube.rollout("deployment", APP, NAMESPACE, timeout=180)
        pods = _pods(kube)
        assert {p.node for p in pods.values()} == {first.name}, pods
        client = sorted(pods)[0]
        for name, pod in pods.items():  # the rescheduled pods answer, directly and as a Service
            assert tier.from_pod(client, pod.ip) == name
        assert {first.get(tier.cluster_ip, 80) for _ in range(4)} <= set(pods)
        # The second node's agent ran the drained pods' CNI DEL.
        gone = {p.ip for p in drained}
        wait_for("the drained pods' addresses to be released",
                 lambda: not gone & set(tier.allocations(second)), 60)

        kube.run("delete", "node", second.name)
        # Its pods go with it (the pod GC), the agent too: its liveness key lapses.
        wait_for(f"the agent on {second.name} to stop", lambda: _down(kube, first, second),
                 180)
        # The agents read Nodes from the API: with the Node gone for NodeRemovalGrace
        # (deploy.NODE_REMOVAL_GRACE), no pod bound to it and its agent down, the node leaves
        # the cluster by itself (agent/cluster/node_gc): ID and subnet freed, the first node
        # drops its mesh to it. No operator's `node remove`.
        wait_for("the first node's agent to free the deleted node",
                 lambda: second.name not in _registry(first), deploy.NODE_REMOVAL_GRACE + 90)
        ids = kube.exec("kube-system", _agent_on(kube, first),
                        f"python3 -m agent.nodes list --config {AGENT_CONFIG}")
        assert second.name not in ids.split(), ids
        for subnet in entry["podSubnets"]:
            wait_for(f"no route to {subnet} on {first.name}",
                     partial(_unrouted, first, subnet), 30)
    finally:
        _restore(kube, saved)


def _registry(node: Node) -> dict[str, dict[str, Any]]:
    """The node registry as `node`'s agent sees it: name -> entry."""
    return {e["name"]: e for e in node.agent("/v1/nodes")["nodes"]}


def _agent_on(kube: Kube, node: Node) -> str:
    return next(str(p["metadata"]["name"])
                for p in kube.get("pods", namespace="kube-system", selector=AGENTS)["items"]
                if p["spec"]["nodeName"] == node.name)


def _down(kube: Kube, first: Node, second: Node) -> bool:
    """`node list` (from the first node's agent) shows the second node's agent as down."""
    out = kube.exec("kube-system", _agent_on(kube, first),
                    f"vswitch-agent --config {AGENT_CONFIG} node list")
    return any(line.split()[1:2] == [second.name] and line.split()[-1] == "down"
               for line in out.splitlines() if line.strip())


def _unrouted(node: Node, subnet: str) -> bool:
    """The node has no route to exactly `subnet` (IPv4 or IPv6)."""
    family = "-6" if ":" in subnet else "-4"
    prefix = ["nsenter", f"--net={node.netns}"] if node.netns else []
    return not subprocess.run([*prefix, "ip", family, "route", "show", subnet],
                              capture_output=True, text=True, check=True).stdout.strip()


def _restore(kube: Kube, saved: Doc) -> None:
    """The Node as it was before the drain (the kubelet on it still runs and reports to it):
    created again when deleted, schedulable again, and its agent back."""
    name = saved["metadata"]["name"]
    if not kube.get("nodes")["items"] or name not in {
            n["metadata"]["name"] for n in kube.get("nodes")["items"]}:
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {k: v for k, v in saved["metadata"].items()
                             if k in ("name", "labels", "annotations")}}
        kube.apply([node])
    kube.run("uncordon", name)
    wait_for(f"{name} to be Ready", lambda: any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in kube.get("node", name)["status"].get("conditions", [])), 120)
    kube.rollout("daemonset", "vswitch-agent", "kube-system")

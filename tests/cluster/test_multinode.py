"""Pods on different nodes reach each other: real agents in node namespaces (testbed/cluster).

Test plan (each test builds its own cluster: fabric namespace, etcd, nodes; always removed):
- three nodes x two dual-stack pods: every pod pings every other pod, IPv4 and IPv6; a node
  pings the pods of another node (its packets leave with its VXLAN address, which the other
  node must route back over the mesh: kube-proxy masquerades a node's connection to a Service
  whose backend is on another node to that address); 1 MiB of TCP
  and a UDP exchange across nodes in both families with the pods' source addresses kept (no NAT
  between pods); a full pod-MTU ping with don't-fragment across nodes (one byte more
  does not leave the pod); a 4th node joins and every existing pod reaches its pod (the time from
  its agent's readiness to being programmed everywhere is printed); removal: refused while the
  node's agent is live unless forced, and then that agent stops being ready; nothing naming the
  node is left on any other node; its node ID goes to the next new node.
- SIGKILL of an agent: the other nodes keep reaching its pod while it is down; a node removed
  meanwhile is pruned when it restarts; nothing is duplicated (its mesh state is what it was).
- etcd killed for 10 s: pods keep reaching each other across nodes; a node started during the
  outage is programmed everywhere once etcd is back.
- UseL2Interconnect: no VXLAN device, routes via the remote node IP; pods reach each other.
- A pod MTU the uplink cannot carry over VXLAN: the agent refuses to start, naming MTUSize.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from testbed.cluster import Cluster, Node, Pod, converged, mentions, mesh_view, sh, wait_for
from testbed.netns import ping as netns_ping
from testbed.podcheck import assert_pods_talk, unreachable


def test_three_nodes_mesh_join_and_removal(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    with Cluster(tmp_path) as cluster:
        nodes = [cluster.add_node(), cluster.add_node(via_env=True), cluster.add_node()]
        pods = [node.add_pod() for node in nodes for _ in range(2)]
        wait_for(lambda: converged(nodes), 30, "mesh of 3 nodes")
        assert all(len(p.ips) == 2 for p in pods), [p.ips for p in pods]
        assert unreachable(pods, pods) == []
        for ip in pods[4].ips:  # node-1 to a pod of node-3
            assert netns_ping(f"/var/run/netns/{nodes[0].netns}", ip), ip

        assert_pods_talk(pods[0], pods[4])  # node-1 and node-3

        fourth = cluster.add_node(start=False)
        fourth.start_agent()
        ready = time.monotonic()
        nodes.append(fourth)
        wait_for(lambda: converged(nodes), 60, "node-4 programmed everywhere")  # the bound
        joined = round(time.monotonic() - ready, 2)
        record_property("node4_programmed_everywhere_after_ready_s", joined)  # in the JUnit XML
        print(f"node-4 programmed on every node {joined}s after its agent became ready")
        new_pod = fourth.add_pod()
        assert unreachable(pods, [new_pod]) == []
        assert unreachable([new_pod], pods) == []

        _remove_and_reuse(cluster, nodes, pods)


def _remove_and_reuse(cluster: Cluster, nodes: list[Node], pods: list[Pod]) -> None:
    gone = nodes[1]
    gone_id = gone.node_id()
    refused = nodes[0].operator("node", "remove", gone.name)
    assert refused.returncode == 1 and "is live" in refused.stderr, refused
    done = nodes[0].operator("node", "remove", gone.name, "--force")
    assert done.returncode == 0, done.stderr
    assert f"ID {gone_id} is free again" in done.stdout
    # its agent learns it was removed and stops being ready (STATUS fails: no new pods)
    wait_for(partial(_removed_reported, gone), 15, f"{gone.name} not ready")
    gone.stop_agent()
    listed = nodes[0].operator("node", "list")
    assert gone.name not in listed.stdout and nodes[0].name in listed.stdout
    cluster.remove_node_namespace(gone)
    rest = [n for n in nodes if n is not gone]
    wait_for(lambda: converged(rest), 30, f"{gone.name} gone from every view")
    for node in rest:  # the view changes first, the kernel a moment later
        wait_for(partial(_clean_of, node, gone, gone_id), 10,
                 f"{gone.name}'s mesh state gone from {node.name}")

    newcomer = cluster.add_node()
    assert newcomer.node_id() == gone_id
    rest.append(newcomer)
    wait_for(lambda: converged(rest), 60, "the newcomer programmed everywhere")
    fresh = newcomer.add_pod()
    alive = [p for p in pods if p.node is not gone]
    assert unreachable(alive, [fresh]) == []


def _removed_reported(node: Node) -> bool:
    status, body = node.get("/readiness")
    return status == 503 and "removed from the cluster" in str(body)


def _clean_of(node: Node, gone: Node, gone_id: int) -> bool:
    return mentions(node, gone, gone_id) == []


def test_agent_killed_keeps_mesh_and_restarts_without_duplicates(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        nodes = [cluster.add_node() for _ in range(3)]
        pods = [node.add_pod() for node in nodes]
        wait_for(lambda: converged(nodes), 30, "mesh of 3 nodes")
        victim, witness, leaving = nodes
        third_id = leaving.node_id()
        before = victim.mesh_state()

        victim.stop_agent(signal.SIGKILL)
        assert unreachable([pods[1]], [pods[0]]) == []  # the kernel state stays
        assert unreachable([pods[0]], [pods[1]]) == []
        # node-3 leaves while node-1's agent is down: its restart must prune it
        leaving.stop_agent()
        out = witness.operator("node", "remove", leaving.name)
        assert out.returncode == 0, out.stderr
        cluster.remove_node_namespace(leaving)
        assert mentions(victim, leaving, third_id) != []  # nobody cleaned node-1 yet

        victim.start_agent()
        wait_for(lambda: converged([victim, witness]), 30, "mesh after the restart")
        wait_for(lambda: mentions(victim, leaving, third_id) == [], 10,
                 "the node removed meanwhile pruned")
        after = victim.mesh_state()
        expected = {kind: [line for line in lines if line not in mentions_lines(before, third_id)]
                    for kind, lines in before.items()}
        assert after == expected
        assert unreachable([pods[1]], [pods[0]]) == []


def mentions_lines(state: dict[str, list[str]], node_id: int) -> set[str]:
    marks = {f"192.168.30.{node_id}", f"12:2b:00:00:00:{node_id:02x}", f"fe80::2b:0:{node_id:x}",
             f"10.1.{node_id}.0/24", f"fd00:10:0:{node_id:x}::/64", f"192.168.16.{10 + node_id}"}
    return {line for lines in state.values() for line in lines if marks & set(line.split())}


def test_etcd_outage_keeps_mesh_and_programs_a_node_added_meanwhile(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        nodes = [cluster.add_node() for _ in range(2)]
        pods = [node.add_pod() for node in nodes]
        wait_for(lambda: converged(nodes), 30, "mesh of 2 nodes")

        cluster.stop_etcd()
        stopped = time.monotonic()
        late = cluster.add_node(start=False)
        late.start_agent(wait=False)  # waits for etcd to claim its node ID
        while time.monotonic() - stopped < 10:
            assert unreachable(pods, pods) == []
            time.sleep(1)
        assert all(mesh_view(n).get(nodes[1 - i].name) == "programmed"
                   for i, n in enumerate(nodes))
        cluster.start_etcd()

        late.wait_ready()
        nodes.append(late)
        wait_for(lambda: converged(nodes), 60, "the late node programmed everywhere")
        late_pod = late.add_pod()
        assert unreachable(pods, [late_pod]) == []
        assert unreachable([late_pod], pods) == []


def test_l2_interconnect_routes_via_node_ips(tmp_path: Path) -> None:
    with Cluster(tmp_path, {"UseL2Interconnect": True}) as cluster:
        nodes = [cluster.add_node() for _ in range(2)]
        pods = [node.add_pod() for node in nodes]
        wait_for(lambda: converged(nodes), 30, "L2 mesh of 2 nodes")
        assert unreachable(pods, pods) == []
        state = nodes[0].mesh_state()
        assert state["fdb"] == []
        assert sh("ip", "-n", nodes[0].netns, "link", "show", "vxlan-vsw",
                  check=False).returncode != 0
        remote_id = nodes[1].node_id()
        assert f"10.1.{remote_id}.0/24 via {nodes[1].node_ip} dev eth0" in " ".join(
            state["routes"])


def test_pod_mtu_that_does_not_fit_the_uplink_is_refused(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        node = cluster.add_node(start=False, MTUSize=1460)
        node.start_agent(wait=False)
        assert node.process is not None
        assert node.process.wait(timeout=60) != 0
        assert "MTUSize 1460 does not fit the uplink eth0 (MTU 1500)" in node.log()
        assert "at most 1450" in node.log()

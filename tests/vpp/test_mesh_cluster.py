"""The node mesh with `Dataplane: vpp`: real agents in node namespaces (testbed/cluster.py),
each node with its own VPP: fake ones everywhere (CI), real ones where the machine can start them
(marker `vpp`; tests/helpers/vpp_nodes.py names the environment variables).

Test plan:
- fake VPPs, three nodes with a pod each: every agent reports every other node programmed; each
  VPP holds exactly one tunnel per remote node, from its own VPP-host interconnect address
  (172.30.<ID>.1) to the remote one, with the remote VXLAN MAC in the bridge domain's FIB, the
  remote BVI addresses as neighbors and pod-VRF routes to the remote pod and VPP-host subnets;
  each node's Linux routes the remote VPP-host and pod subnets via the remote node IP
  (protocol 118); the interconnect carries pod MTU + 50 and Linux's routes to the pods keep the
  pod MTU; the veth pods' IPv4 TSO is off, IPv6's on. One VPP restarts: its agent rebuilds
  the same mesh (its VPP watch asks for a relist at once). A node stopped and removed with
  `node remove`: nothing naming it is left in the other VPPs or in their Linux routes, and
  the others still hold each other.
- fake VPPs with UseL2Interconnect: no tunnel, no BVI; Linux routes the remote pod subnets via
  the remote node IP.
- with `Dataplane: vpp`, a pod MTU above the uplink MTU - 50, or MainVRFID == PodVRFID, refuse
  the start (before VPP is reached).
- real VPPs (two nodes): the same programming, then pods on both nodes reach each other through
  VPP's VXLAN mesh, IPv4 and IPv6; 1 MiB of TCP and a UDP exchange across, sources kept; a
  full pod-MTU ping with don't-fragment across (one byte more does not leave the pod); then
  the node removal check. Every VPP instance is stopped at the end.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from agent.linux import ethtool
from testbed.cluster import (
    Cluster,
    Node,
    Pod,
    assert_pods_talk,
    converged,
    sh,
    unreachable,
    wait_for,
)
from testbed.netns import unique
from testbed.traffic import Server, tcp_transfer
from tests.helpers.vpp_nodes import REAL_VPP, VppNodes, linux_routes, naming, vpp_view


@contextmanager
def vpp_cluster(tmp_path: Path, real: bool, **config: object) -> Iterator[VppNodes]:
    with Cluster(tmp_path, dict(config)) as cluster:
        vpps = VppNodes(cluster, real)
        try:
            yield vpps
        finally:
            cluster.close()  # pods deleted and agents stopped while their VPPs still run
            vpps.close()


def held(vpps: VppNodes, node: Node) -> dict[str, list[str]]:
    api = vpps.api(node)
    try:
        return {**vpp_view(api), "linux": linux_routes(node)}
    finally:
        api.close()


def check_programmed(vpps: VppNodes, nodes: list[Node]) -> None:
    """Each node holds exactly the mesh to the others, in VPP and in Linux."""
    ids = {n.name: n.node_id() for n in nodes}
    for node in nodes:
        me, state = ids[node.name], held(vpps, node)
        others = [n for n in nodes if n is not node]
        assert state["tunnels"] == sorted(
            f"172.30.{me}.1 -> 172.30.{ids[n.name]}.1 vni 10 node {ids[n.name]}" for n in others)
        assert state["fib"] == sorted(f"12:2b:00:00:00:{ids[n.name]:02x}" for n in others)
        assert state["bvi"] == [f"12:2b:00:00:00:{me:02x}"]  # VPP's own entry, never pruned
        for other in others:
            i = ids[other.name]
            assert f"192.168.30.{i} 12:2b:00:00:00:{i:02x}" in state["neigh"], state
            assert {f"10.1.{i}.0/24", f"172.30.{i}.0/24", f"fd00:10:0:{i:x}::/64"} <= set(
                state["routes"]), state
            linux = " | ".join(state["linux"])
            for subnet in (f"172.30.{i}.0/24", f"10.1.{i}.0/24"):
                assert f"{subnet} via {other.node_ip} dev eth0 onlink" in linux, linux


def check_removal(vpps: VppNodes, nodes: list[Node]) -> list[Node]:
    """Stops the last node's agent, removes it with the operator command and waits until no
    other node holds anything naming it; returns the nodes left."""
    gone, rest = nodes[-1], nodes[:-1]
    gone_id = gone.node_id()
    assert mentioning(vpps, rest[0], gone, gone_id) != []
    gone.stop_agent()
    out = rest[0].operator("node", "remove", gone.name)
    assert out.returncode == 0, out.stderr
    for node in rest:
        try:
            wait_for(partial(_clean_of, vpps, node, gone, gone_id), 30,
                     f"{gone.name} gone from {node.name}'s VPP and routes")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; left: {mentioning(vpps, node, gone, gone_id)}") from exc
    wait_for(lambda: converged(rest), 30, "the rest converged")
    check_programmed(vpps, rest)
    return rest


def mentioning(vpps: VppNodes, node: Node, gone: Node, gone_id: int) -> list[str]:
    """What `node` holds (VPP and Linux) that names node `gone`."""
    return naming([line for lines in held(vpps, node).values() for line in lines], gone, gone_id)


def _clean_of(vpps: VppNodes, node: Node, gone: Node, gone_id: int) -> bool:
    return mentioning(vpps, node, gone, gone_id) == []


def test_vpp_mesh_programmed_and_removed_with_fake_vpps(tmp_path: Path) -> None:
    with vpp_cluster(tmp_path, real=False) as vpps:
        nodes = [vpps.add_node() for _ in range(3)]
        pods = [node.add_pod() for node in nodes]
        wait_for(lambda: converged(nodes), 30, "mesh of 3 VPP nodes")
        # VPP segments the pods' GSO packets before VXLAN; its IPv4 case is broken for
        # AF_PACKET input, so the pods segment IPv4 TCP themselves (docs/vpp.md)
        assert not ethtool.feature(pods[0].netns, "eth0", "tx-tcp-segmentation")
        assert ethtool.feature(pods[0].netns, "eth0", "tx-tcp6-segmentation")
        check_programmed(vpps, nodes)
        first = nodes[0]
        me = first.node_id()
        link = sh("ip", "-n", first.netns, "link", "show", "vpp1").stdout
        assert " mtu 1500 " in link, link  # pod MTU 1450 + VXLAN's 50
        to_pods = sh("ip", "-n", first.netns, "route", "show", f"10.1.{me}.0/24").stdout
        assert "dev vpp1" in to_pods and "mtu 1450" in to_pods, to_pods
        before = held(vpps, first)
        vpps.fakes[vpps.names[first.name]].restart()  # VPP lost everything
        wait_for(lambda: held(vpps, first)["tunnels"] == before["tunnels"], 15,
                 "the mesh rebuilt after a VPP restart")
        wait_for(lambda: held(vpps, first) == before, 10, "all of the mesh rebuilt")
        check_removal(vpps, nodes)


def test_vpp_with_l2_interconnect_routes_via_node_ips(tmp_path: Path) -> None:
    with vpp_cluster(tmp_path, real=False, UseL2Interconnect=True) as vpps:
        nodes = [vpps.add_node() for _ in range(2)]
        wait_for(lambda: converged(nodes), 30, "L2 mesh of 2 VPP nodes")
        for node, other in (nodes, nodes[::-1]):
            state = held(vpps, node)
            assert state["tunnels"] == state["fib"] == state["routes"] == [], state
            linux = " | ".join(state["linux"])
            i = other.node_id()
            assert f"10.1.{i}.0/24 via {other.node_ip} dev eth0 onlink" in linux
            assert "172.30." not in linux, linux



@pytest.mark.vpp
@pytest.mark.skipif(not REAL_VPP, reason="VSWITCH_TEST_VPP_START, VSWITCH_TEST_VPP_STOP and "
                    "VSWITCH_TEST_VPP_MESH_SOCKET are not set (no real VPPs to start)")
def test_pods_reach_each_other_through_real_vpps(tmp_path: Path) -> None:
    with vpp_cluster(tmp_path, real=True) as vpps:
        nodes = [vpps.add_node() for _ in range(2)]
        a, b = nodes[0].add_pod(), nodes[1].add_pod()
        wait_for(lambda: converged(nodes), 60, "mesh of 2 real-VPP nodes")
        check_programmed(vpps, nodes)
        assert all(len(p.ips) == 2 for p in (a, b)), [a.ips, b.ips]
        wait_for(lambda: unreachable([a], [b]) == [], 10, "the first ping across")
        assert unreachable([a, b], [a, b]) == []
        assert_pods_talk(a, b)
        assert service_to_the_other_node(nodes[0], a, b)
        check_removal(vpps, nodes)


def service_to_the_other_node(node: Node, client: Pod, backend: Pod) -> bool:
    """A Service whose backend is a pod of another node (kube-proxy's DNAT, stood in for by a
    table of the test's on the client's node): the request crosses the uplink, the reply comes
    back through the client node's conntrack (the agent's return-path masquerade)."""
    table = f"test-kube-proxy-{unique('')}"
    rules = [f"add table ip {table}",
             f"add chain ip {table} pre {{ type nat hook prerouting priority -100 ; }}",
             f"add rule ip {table} pre ip daddr 10.96.7.7 tcp dport 80 dnat to "
             f"{backend.ips[0]}:7779"]
    subprocess.run(["ip", "netns", "exec", node.netns, "nft", "-f", "-"], input="\n".join(rules),
                   text=True, check=True)
    with Server(backend.netns, "tcp", "0.0.0.0", 7779):
        sent = tcp_transfer(client.netns, "10.96.7.7", 80)
    assert sent.source in ("", node.node_ip), sent  # the backend sees the client's node
    return sent.ok


def test_vpp_mesh_refuses_a_pod_mtu_the_uplink_cannot_carry_and_one_vrf(tmp_path: Path) -> None:
    """Both checks run before the dataplane starts: no VPP is needed to be refused."""
    with Cluster(tmp_path) as cluster:
        vpp: dict[str, Any] = {"Dataplane": "vpp", "VPPAPISocket": str(tmp_path / "none.sock"),
                               "UseTAPInterfaces": False}
        cases: list[tuple[dict[str, Any], list[str]]] = [
            ({"MTUSize": 1460}, ["MTUSize 1460 does not fit the uplink eth0 (MTU 1500) over "
                                 "VXLAN (50 bytes)", "at most 1450"]),
            ({"MainVRFID": 3, "PodVRFID": 3}, ["MainVRFID and PodVRFID are both 3"]),
        ]
        for extra, expected in cases:
            node = cluster.add_node(start=False, **vpp, **extra)
            node.start_agent(wait=False)
            assert node.process is not None
            assert node.process.wait(timeout=60) != 0
            assert all(text in node.log() for text in expected), node.log()

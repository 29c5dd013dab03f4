"""VPP's own WireGuard (`Dataplane: vpp`, `VXLANOwner: vpp`, `Encryption: wireguard`) on real
VPPs: skipped unless VSWITCH_TEST_VPP_START, _STOP and _MESH_SOCKET say how to start them
(testbed/vpp_nodes.py). The mesh's programming, the capture with the marker and the MTU are
tests/vpp/test_mesh_cluster.py's (`test_encrypted_pods_through_real_vpps[vpp]`); these are the
life-cycle cases the kernel dataplane runs in tests/cluster/test_encryption.py.

Test plan (each test its own cluster, every VPP stopped at the end):
- a third node joins while pods of the first two exchange paced UDP and hold a TCP connection,
  and is reached encrypted; node 1 rotates its key under that traffic; the third node leaves:
  its peer and routes are gone from the other VPPs; the TCP connection carried its bytes intact
  and the UDP loss is counted and bounded.
- a stale peer key (node 1's agent paused while node 2 rotates): TCP and UDP between them fail,
  and the fabric carries only WireGuard between the VPPs, no pod address and no marker; node 1
  resumes and traffic flows again.
- the rollout (docs/encryption.md) on a running cluster of VPP's own VXLAN mesh: each node
  restarted to wireguard-permissive, then each to wireguard, while one TCP connection and paced
  UDP run between pods of the two nodes made before it: the connection lives through it, the
  UDP loss is counted and bounded, and afterwards only WireGuard crosses (those pods' waiting
  ends got their checksum offload switched off at the agent's start).
- node 1's agent killed: the pods keep talking (VPP holds the interface and peers); restarted,
  the same key and the same peers, none twice. Node 1's VPP restarted: the agent makes the
  interface and peers again from its key file and the registry; the pods talk again (TCP and
  UDP, both families, at the pod MTU) with only WireGuard on the fabric; REST, `wireguard show`
  and vswitchctl show the peer established (VPP keeps no handshake time or bytes per peer).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from agent.model.node import fingerprint
from testbed.capture import Capture
from testbed.cluster import ETCD_URL, Cluster, Node, Pod, converged, wait_for
from testbed.podcheck import assert_pods_talk, unreachable
from testbed.tools import REPO
from testbed.traffic import Paced, Server, tcp_transfer, udp_exchange
from tests.helpers.vpp_nodes import REAL_VPP, VppNodes, wireguard_view

POD_MTU = 1420
MARKER = "vswitch-cni-cleartext-marker"
OWN = {"Encryption": "wireguard", "VXLANOwner": "vpp"}
pytestmark = [
    pytest.mark.vpp,
    pytest.mark.skipif(not REAL_VPP, reason="VSWITCH_TEST_VPP_START, VSWITCH_TEST_VPP_STOP and "
                       "VSWITCH_TEST_VPP_MESH_SOCKET are not set (no real VPPs to start)"),
]


def key(node: Node) -> str:
    return str(node.get("/v1/nodes")[1]["local"]["wireguard"]["publicKey"])


def held(vpps: VppNodes, node: Node) -> dict[str, list[str]]:
    api = vpps.api(node)
    try:
        api.connect()
        return wireguard_view(api)
    finally:
        api.close()


def start(cluster: Cluster, vpps: VppNodes, n: int = 2) -> tuple[list[Node], list[Pod]]:
    nodes = [vpps.add_node() for _ in range(n)]
    pods = [node.add_pod() for node in nodes]
    wait_for(lambda: converged(nodes), 60, f"VPP WireGuard mesh of {n} nodes")
    wait_for(lambda: unreachable(pods, pods) == [], 30, "pods reaching each other")
    return nodes, pods


def ends(nodes: list[Node]) -> set[str]:
    """Where VPP's WireGuard speaks from: each VPP's end of its interconnect."""
    return {f"172.30.{n.node_id()}.1" for n in nodes}


def only_wireguard(cap: Capture, endpoints: set[str], pods: list[Pod]) -> None:
    assert cap.containing(MARKER.encode()) == []
    pod_ips = {ip for p in pods for ip in p.ips}
    assert [f for f in cap.frames if {f.src, f.dst} & pod_ips] == []
    kinds = {(f.proto, f.sport, f.dport) for f in cap.between(endpoints)}
    assert kinds <= {("udp", 51820, 51820)}, kinds


def cluster_of(tmp_path: Path) -> tuple[Cluster, VppNodes]:
    cluster = Cluster(tmp_path, dict(OWN))
    return cluster, VppNodes(cluster, real=True)


def test_join_rotation_and_leave_under_traffic(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    cluster, vpps = cluster_of(tmp_path)
    with cluster:
        try:
            nodes, pods = start(cluster, vpps)
            before = key(nodes[0])
            with Server(pods[1].netns, "tcp", pods[1].ips[0], 7784), \
                    Server(pods[1].netns, "udp", pods[1].ips[0], 7785):
                tcp = Paced(pods[0].netns, "tcp", pods[1].ips[0], 7784, 20)
                udp = Paced(pods[0].netns, "udp", pods[1].ips[0], 7785, 20)
                third = vpps.add_node()
                wait_for(lambda: converged([*nodes, third]), 60, "node-3 programmed everywhere")
                newcomer = third.add_pod()
                wait_for(lambda: unreachable(pods, [newcomer]) == [], 30, "node-3's pod reached")
                assert unreachable([newcomer], pods) == []
                third_key, third_id = key(third), third.node_id()
                assert any(third_key in line for line in held(vpps, nodes[0])["peers"])

                out = nodes[0].operator("wireguard", "rotate")
                assert out.returncode == 0, out.stdout + out.stderr
                wait_for(lambda: all(before not in " ".join(held(vpps, n)["peers"])
                                     for n in (nodes[1], third)), 15,
                         "node-1's old key gone from the other VPPs")

                third.stop_agent()
                out = nodes[0].operator("node", "remove", third.name, "--force")
                assert out.returncode == 0, out.stderr
                for node in nodes:
                    wait_for(partial(_gone, vpps, node, third_key, third_id), 30,
                             f"node-3 gone from {node.name}'s VPP")
                source, total, check = tcp.result()
                sent, answered, gap_ms = map(int, udp.result())
            assert key(nodes[0]) != before
            assert source == pods[0].ips[0] and check == "ok" and "!=" not in total, (
                source, total, check)
            lost = sent - answered
            record_property("vpp_rotation_udp_lost", lost)
            record_property("vpp_rotation_udp_longest_gap_ms", gap_ms)
            print(f"join, rotation, leave: TCP connection intact ({total} bytes); UDP "
                  f"{lost}/{sent} datagrams lost, longest gap {gap_ms} ms")
            # a bound for a loaded machine: a rotation costs the rotating node's new handshake
            assert lost <= sent * 0.2 and gap_ms <= 3000, (sent, answered, gap_ms)
            assert unreachable(pods, pods) == []
        finally:
            cluster.close()
            vpps.close()


def _gone(vpps: VppNodes, node: Node, gone_key: str, gone_id: int) -> bool:
    view = held(vpps, node)
    text = " ".join(view["peers"] + view["wg_routes"] + view["wg_main"])
    return gone_key not in text and f"10.1.{gone_id}.0/24" not in text


def test_a_stale_peer_key_stops_traffic_and_sends_nothing_in_clear(tmp_path: Path) -> None:
    cluster, vpps = cluster_of(tmp_path)
    with cluster:
        try:
            nodes, pods = start(cluster, vpps)
            endpoints = ends(nodes)  # asked while node 1's agent still answers
            assert nodes[0].process is not None
            nodes[0].process.send_signal(signal.SIGSTOP)  # node 1 cannot follow the rotation
            try:
                out = nodes[1].operator("wireguard", "rotate")
                assert out.returncode == 0, out.stdout + out.stderr
                time.sleep(0.5)
                with Capture(f"/var/run/netns/{cluster.fabric}", nodes[0].fabric_port) as cap:
                    blocked = tcp_transfer(pods[0].netns, pods[1].ips[0], 7782, 64 * 1024,
                                           marker=MARKER)
                    lost = udp_exchange(pods[1].netns, pods[0].ips[0], 7783, 3, marker=MARKER)
                assert not blocked.ok and not lost.ok
                only_wireguard(cap, endpoints, pods)
            finally:
                nodes[0].process.send_signal(signal.SIGCONT)
            wait_for(lambda: unreachable(pods, pods) == [], 30, "traffic after node 1 caught up")
        finally:
            cluster.close()
            vpps.close()


def test_agent_and_vpp_restarts_keep_the_encrypted_mesh(tmp_path: Path) -> None:
    cluster, vpps = cluster_of(tmp_path)
    with cluster:
        try:
            nodes, pods = start(cluster, vpps)
            mine = key(nodes[0])
            before = held(vpps, nodes[0])
            assert len(before["peers"]) == 1 and len(before["wg"]) == 1, before

            nodes[0].stop_agent(signal.SIGKILL)
            assert unreachable(pods, pods) == []  # VPP holds the interface and peers
            nodes[0].start_agent()
            wait_for(lambda: converged(nodes), 30, "mesh after the agent's restart")
            assert key(nodes[0]) == mine
            assert held(vpps, nodes[0]) == before  # the same interface and peers, none twice

            vpps.restart(nodes[0])
            wait_for(lambda: unreachable(pods, pods) == [], 60,
                     "pods reaching each other after node 1's VPP restarted")
            assert key(nodes[0]) == mine
            again = held(vpps, nodes[0])
            assert (again["wg"], again["peers"]) == (before["wg"], before["peers"]), again
            with Capture(f"/var/run/netns/{cluster.fabric}", nodes[0].fabric_port) as cap:
                assert_pods_talk(pods[0], pods[1], mtu=POD_MTU)
            only_wireguard(cap, ends(nodes), pods)
            assert cap.between(ends(nodes)) != []  # the pods' traffic crossed, encrypted
            check_views(cluster, nodes)
        finally:
            cluster.close()
            vpps.close()


def check_views(cluster: Cluster, nodes: list[Node]) -> None:
    """What VPP tells of its peers: REST's view (established, no handshake time or bytes),
    `wireguard show` on the node (through VPP's API socket) and vswitchctl's table."""
    other = nodes[1]
    wait_for(lambda: [p["established"] for p in nodes[0].get("/v1/nodes")[1]["wireguard"]
                      ["peers"]] == [True], 10, "the view: node-2's session established")
    view = nodes[0].get("/v1/nodes")[1]["wireguard"]
    assert view["implementation"] == "vpp" and view["publicKey"] == key(nodes[0])
    peer = view["peers"][0]
    assert (peer["node"], peer["publicKey"], peer["endpoint"]) == (
        other.name, key(other), f"172.30.{other.node_id()}.1:51820")
    assert (peer["latestHandshake"], peer["rxBytes"], peer["txBytes"]) == (None, None, None)
    shown = nodes[0].operator("wireguard", "show")
    assert shown.returncode == 0, shown.stderr
    assert f"key {fingerprint(key(nodes[0]))}" in shown.stdout, shown.stdout
    assert f"peer {other.name}\t{fingerprint(key(other))}" in shown.stdout, shown.stdout
    assert "established" in shown.stdout and key(nodes[0]) not in shown.stdout
    table = subprocess.run(
        ["ip", "netns", "exec", nodes[0].netns, sys.executable, "-m", "vswitchctl", "--etcd",
         ETCD_URL, "wireguard"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert table.returncode == 0, table.stderr
    row = next(line.split() for line in table.stdout.splitlines()
               if line.startswith(nodes[0].name))
    assert row[2:4] == [other.name, fingerprint(key(other))] and "established" in row, row


def test_rollout_through_permissive_keeps_pods_connected(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    # clear: VPP's VXLAN tunnels, the pod MTU set to the encrypted one first (the rollout's step 1)
    cluster = Cluster(tmp_path, {"VXLANOwner": "vpp", "MTUSize": POD_MTU})
    vpps = VppNodes(cluster, real=True)
    with cluster:
        try:
            nodes, pods = start(cluster, vpps)
            with Server(pods[1].netns, "tcp", pods[1].ips[0], 7786), \
                    Server(pods[1].netns, "udp", pods[1].ips[0], 7787):
                tcp = Paced(pods[0].netns, "tcp", pods[1].ips[0], 7786, 60)
                udp = Paced(pods[0].netns, "udp", pods[1].ips[0], 7787, 60)
                began = time.monotonic()
                for mode in ("wireguard-permissive", "wireguard"):
                    for node in nodes:  # one at a time, as a DaemonSet rolls
                        node.stop_agent()
                        node.extra["Encryption"] = mode
                        node.start_agent()
                        wait_for(lambda: converged(nodes), 60, f"{node.name} {mode}")
                        wait_for(lambda: unreachable(pods, pods) == [], 30,
                                 f"pods reaching each other after {node.name} went {mode}")
                took = time.monotonic() - began
                source, total, check = tcp.result(timeout=120)
                sent, answered, gap_ms = map(int, udp.result(timeout=120))
            assert took < 60, took  # the traffic ran through all of it
            assert source == pods[0].ips[0] and check == "ok" and "!=" not in total, (
                source, total, check)
            record_property("vpp_rollout_udp_lost", sent - answered)
            print(f"rollout in {took:.1f} s: TCP connection intact ({total} bytes); UDP "
                  f"{sent - answered}/{sent} lost, longest gap {gap_ms} ms")
            # a bound for a loaded machine: each restart may cost its node's pods a moment
            assert answered >= sent * 0.8 and gap_ms <= 5000, (sent, answered, gap_ms)
            assert all(held(vpps, n)["wg"] and len(held(vpps, n)["peers"]) == 1 for n in nodes)
            with Capture(f"/var/run/netns/{cluster.fabric}", nodes[0].fabric_port) as cap:
                assert_pods_talk(pods[0], pods[1], mtu=POD_MTU)
            only_wireguard(cap, ends(nodes), pods)
        finally:
            cluster.close()
            vpps.close()

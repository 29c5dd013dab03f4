"""Encryption with `Dataplane: vpp` (`VXLANOwner: linux`: the node's WireGuard carries what VPP
hands to Linux) across restarts, on real VPPs: skipped unless VSWITCH_TEST_VPP_START, _STOP and
_MESH_SOCKET say how to start them (testbed/vpp_nodes.py). The mesh itself, the capture and the
MTU are tests/vpp/test_mesh_cluster.py's; the kernel dataplane's whole set is
tests/cluster/test_encryption.py.

Test plan (two nodes, a pod each, each node's own VPP):
- the agent of node 1 killed (SIGKILL): the pods keep talking meanwhile (the device and its
  peers outlive the agent); restarted, it has the same key and the same peers, nothing twice;
- node 1's VPP restarted under its pod: the agent notices and rewires the pod; the WireGuard
  device, its key and its peers are untouched (they are Linux's); the pods talk again, TCP and
  UDP in both families at the pod MTU, and the fabric carries only WireGuard meanwhile.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from testbed.capture import Capture
from testbed.cluster import Cluster, Node, converged, sh, wait_for
from testbed.podcheck import assert_pods_talk, unreachable
from testbed.vpp import VppProbe
from tests.helpers.vpp_nodes import REAL_VPP, VppNodes

POD_MTU = 1420
pytestmark = [
    pytest.mark.vpp,
    pytest.mark.skipif(not REAL_VPP, reason="VSWITCH_TEST_VPP_START, VSWITCH_TEST_VPP_STOP and "
                       "VSWITCH_TEST_VPP_MESH_SOCKET are not set (no real VPPs to start)"),
    pytest.mark.skipif(not all(os.path.exists(f"/usr/bin/{b}") for b in ("wg", "wireguard-go")),
                       reason="needs wireguard-tools and wireguard-go (make setup)"),
]


def peers(node: Node) -> list[list[str]]:
    """The WireGuard device's peers: public key, preshared key, endpoint, allowed IPs."""
    ifname = node.config()["WireGuardInterface"]
    out = sh("ip", "netns", "exec", node.netns, "wg", "show", ifname, "dump").stdout
    return [line.split("\t")[:4] for line in out.splitlines()[1:]]


def vpp_pid(vpps: VppNodes, node: Node) -> int:
    probe = VppProbe(vpps.sockets[node.name])
    try:
        return probe.pid()
    finally:
        probe.close()


def test_agent_and_vpp_restarts_keep_the_encrypted_mesh(tmp_path: Path) -> None:
    with Cluster(tmp_path, {"Encryption": "wireguard"}) as cluster:
        vpps = VppNodes(cluster, real=True)
        try:
            nodes = [vpps.add_node(), vpps.add_node()]
            pods = [node.add_pod() for node in nodes]
            wait_for(lambda: converged(nodes), 60, "WireGuard mesh of 2 real-VPP nodes")
            wait_for(lambda: unreachable(pods, pods) == [], 30, "pods reaching each other")
            key = nodes[0].get("/v1/nodes")[1]["local"]["wireguard"]["publicKey"]
            before = peers(nodes[0])
            assert len(before) == 1

            nodes[0].stop_agent(signal.SIGKILL)
            assert unreachable(pods, pods) == []  # the device outlives its agent
            nodes[0].start_agent()
            wait_for(lambda: converged(nodes), 30, "mesh after the agent's restart")
            assert nodes[0].get("/v1/nodes")[1]["local"]["wireguard"]["publicKey"] == key
            assert peers(nodes[0]) == before

            old_pid = vpp_pid(vpps, nodes[0])
            vpps.restart(nodes[0])
            assert vpp_pid(vpps, nodes[0]) != old_pid  # a new VPP: it holds nothing of before
            wait_for(lambda: unreachable(pods, pods) == [], 60,
                     "pods reaching each other after node 1's VPP restarted")
            assert peers(nodes[0]) == before
            assert nodes[0].get("/v1/nodes")[1]["local"]["wireguard"]["publicKey"] == key
            with Capture(f"/var/run/netns/{cluster.fabric}", nodes[0].fabric_port) as cap:
                assert_pods_talk(pods[0], pods[1], mtu=POD_MTU)
            kinds = {(f.proto, f.sport, f.dport)
                     for f in cap.between({n.node_ip for n in nodes})}
            assert kinds == {("udp", 51820, 51820)}, kinds
        finally:
            cluster.close()  # pods deleted and agents stopped while their VPPs still run
            vpps.close()

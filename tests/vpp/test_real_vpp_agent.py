"""The whole agent against a real VPP: skipped unless VSWITCH_TEST_VPP_SOCKET names its socket
(and the restart test unless VSWITCH_TEST_VPP_RESTART says how to restart that VPP).

Plan: the real agent process (`Dataplane: vpp`, veth + AF_PACKET, a test-only pod subnet and
interconnect names) and the real plugin wire 20 pods; every pod pings its neighbour pod and the
node through VPP. If VSWITCH_TEST_VPP_RESTART holds a shell command that restarts VPP (and
returns once it is started again, e.g. `systemctl restart vpp`), VPP is restarted under the 20
live pods: the running agent notices, repairs them, and all 20 reach each other again, without
an agent restart. DEL of all leaves no pod interface, route or allocation.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.dataplane.vpp import VppConfig, VppDataplane
from testbed.agent import AgentHandle, net_config, run_plugin, running_agent
from testbed.netns import ping
from testbed.traffic import Server, tcp_transfer, udp_exchange

SOCKET = os.environ.get("VSWITCH_TEST_VPP_SOCKET", "")
RESTART = os.environ.get("VSWITCH_TEST_VPP_RESTART", "")
API_DIR = os.environ.get("VSWITCH_TEST_VPP_API_DIR", "")
PODS = 20
Pod = tuple[str, str, str]  # (netns path, container ID, address)
SUBNET = "10.252.0.0/16"
pytestmark = [
    pytest.mark.vpp,
    pytest.mark.skipif(not SOCKET, reason="VSWITCH_TEST_VPP_SOCKET is not set (no real VPP)"),
]


@pytest.fixture
def agent(tmp_path: Path, etcd_endpoints: list[str]) -> Iterator[AgentHandle]:
    suffix = secrets.token_hex(2)
    with running_agent(
        tmp_path, etcd_endpoints, pod_subnet=SUBNET, node_name=f"realvpp-{suffix}", wait=60,
        extra_config={
            "Dataplane": "vpp",
            "VPPAPISocket": SOCKET,
            "VPPAPIDir": API_DIR,
            "UseTAPInterfaces": False,
            "VPPHostInterface": f"vsr{suffix}h",
            "VPPHostPeerInterface": f"vsr{suffix}v",
            # a VRF no other VPP user of this machine is likely to have
            "PodVRFID": 251,
        },
    ) as handle:
        status, ipam = handle.get("/contiv/v1/ipam")
        assert status == 200, ipam
        yield handle
    # VPP as the test found it (the agent leaves its base configuration for the next start).
    subnet = ipaddress.ip_network(ipam["podNetwork"])
    gateway = ipaddress.ip_interface(f"{subnet.network_address + 1}/{subnet.prefixlen}")
    dp = VppDataplane(VppConfig(
        api_socket=SOCKET, api_dir=API_DIR or None, pod_vrf_id=251, pod_gateways=(gateway,),
        host_ifname=f"vsr{suffix}h", host_vpp_ifname=f"vsr{suffix}v",
    ))
    try:
        dp.teardown()
    finally:
        dp.close()


@pytest.fixture
def pods(agent: AgentHandle, make_netns: Callable[[], str]) -> Iterator[list[Pod]]:
    """PODS pods ADDed through the real plugin; at the end every DEL must succeed and leave
    no record and no allocation."""
    conf = net_config(agent)
    added: list[Pod] = []
    try:
        for _ in range(PODS):
            netns, cid = make_netns(), f"c{secrets.token_hex(8)}"
            out = run_plugin("ADD", conf, container_id=cid, netns=netns)
            assert out.returncode == 0, out.stdout + out.stderr
            added.append((netns, cid, out.json["ips"][0]["address"].split("/")[0]))
        yield added
    finally:
        for netns, cid, _ in added:
            out = run_plugin("DEL", conf, container_id=cid, netns=netns)
            assert out.returncode == 0, out.stdout
    assert agent.allocated() == set()
    status, records = agent.get("/v1/pods")
    assert status == 200 and records["pods"] == []


def host_linux_ip(agent: AgentHandle) -> str:
    status, ipam = agent.get("/contiv/v1/ipam")
    assert status == 200, ipam
    network = ipaddress.ip_network(ipam["vppHostNetwork"])
    return str(network.network_address + 2)  # VPP's end is .1, the node's .2 (Contiv's rule)


def all_reachable(pods: list[Pod], node_ip: str) -> list[str]:
    """Pod i pings pod i+1 and the node; returns what failed."""
    failed = []
    for i, (netns, cid, _) in enumerate(pods):
        peer = pods[(i + 1) % len(pods)][2]
        if not ping(netns, peer):
            failed.append(f"{cid} -> {peer}")
        if not ping(netns, node_ip):
            failed.append(f"{cid} -> node {node_ip}")
    return failed


def test_twenty_pods_reach_each_other_and_the_node_through_vpp(
    agent: AgentHandle, pods: list[Pod]
) -> None:
    node_ip = host_linux_ip(agent)
    assert all_reachable(pods, node_ip) == []
    (ns_a, _, _), (ns_b, _, addr_b) = pods[0], pods[1]
    with Server(ns_b, "tcp", addr_b, 5101), Server(ns_b, "udp", addr_b, 5102), \
            Server(f"/proc/{os.getpid()}/ns/net", "tcp", node_ip, 5103):
        tcp = tcp_transfer(ns_a, addr_b, 5101)
        assert tcp.ok, tcp.detail
        assert udp_exchange(ns_a, addr_b, 5102).ok
        to_node = tcp_transfer(ns_a, node_ip, 5103)
        assert to_node.ok, to_node.detail


@pytest.mark.skipif(not RESTART, reason="VSWITCH_TEST_VPP_RESTART is not set (no way to "
                    "restart this VPP)")
def test_twenty_pods_survive_a_vpp_restart_without_an_agent_restart(
    agent: AgentHandle, pods: list[Pod]
) -> None:
    node_ip = host_linux_ip(agent)
    assert all_reachable(pods, node_ip) == []
    before = (agent.get("/v1/reconcile")[1].get("lastRepair") or {}).get("generation", 1)
    subprocess.run(["sh", "-c", RESTART], check=True, timeout=120)
    deadline = time.monotonic() + 60
    report: dict[str, Any] = {}
    while time.monotonic() < deadline:
        report = agent.get("/v1/reconcile")[1].get("lastRepair") or {}
        if int(report.get("generation", 0)) > before:
            break
        time.sleep(0.2)
    assert report.get("damaged") == {}, report
    assert agent.process.poll() is None
    assert all_reachable(pods, node_ip) == []

"""Pod traffic between nodes encrypted with WireGuard (`Encryption: wireguard`, kernel dataplane):
real agents in node namespaces (testbed/cluster), wireguard-go where the kernel has no WireGuard.

Test plan (each test builds its own cluster, always removed):
- the proof, on and off: a capture on the fabric port of node 1 while pods of two nodes exchange
  TCP and UDP carrying a marker string, both families, and node 1 itself reaches a pod of node 2
  (the mesh's own traffic). Encrypted: between the node IPs only UDP on WireGuard's port, and
  the marker nowhere. Off: the marker is on the wire (the check can fail).
- encrypted pods talk as users do (TCP, UDP, both families); the largest DF ping of the 1420 pod
  MTU crosses and one byte more is refused in the pod itself ("message too long").
- the key: a 0600 file in StateDir; its private half in no registry entry, REST answer, metric
  or log line; the public key published; REST and vswitchctl show peers with handshakes.
- a third node joins during paced UDP between the first two and is reached encrypted, then
  leaves: its peer and routes are gone from the others, the first two's traffic went on.
- a strict node and one without a key: the strict one reports the other failed, naming why, and
  its pods' packets to it go nowhere (nothing in clear on the wire).
- a stale peer key (node 1's agent paused while node 2 rotates): traffic stops, nothing goes in
  clear; node 1 resumes and it flows again.
- rotation under traffic: one TCP connection lives through it, UDP loss is counted and bounded.
- agent restart: the device and its peers carry traffic meanwhile; after it, the same key, the
  same peers, nothing duplicated.
- the rollout on a running cluster, as docs/encryption.md orders it: every node restarted with
  `wireguard-permissive`, then every node with `wireguard`; one TCP connection and paced UDP run
  through all of it; at the end only WireGuard on the wire, no VXLAN device left.
- a pod MTU that does not fit WireGuard's overhead is refused at start, naming MTUSize.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from agent.model.node import fingerprint
from testbed.capture import Capture
from testbed.cluster import ETCD_URL, Cluster, Node, Pod, converged, in_netns, sh, wait_for
from testbed.netns import run_in
from testbed.podcheck import assert_pods_talk, unreachable
from testbed.tools import REPO
from testbed.traffic import Paced, Server, tcp_transfer, udp_exchange

WG = {"Encryption": "wireguard"}
MARKER = "vswitch-cni-cleartext-marker"
WG_PORT = 51820
POD_MTU = 1420

pytestmark = pytest.mark.skipif(
    not all(os.path.exists(f"/usr/bin/{b}") for b in ("wg", "wireguard-go")),
    reason="needs wireguard-tools and wireguard-go (make setup installs them)")


def _two_nodes(cluster: Cluster, encrypted: bool = True) -> tuple[list[Node], list[Pod]]:
    """Two nodes with a pod each, their mesh converged and, encrypted, their first handshake
    done (a node programs a peer before the other side has it: the handshake follows within
    seconds, see WireGuardMesh._initiate_again)."""
    nodes = [cluster.add_node(), cluster.add_node()]
    pods = [node.add_pod() for node in nodes]
    wait_for(lambda: converged(nodes), 30, "mesh of 2 nodes")
    if encrypted:
        took = wait_for(lambda: all(_peer_seen(n) for n in nodes), 15, "first handshakes")
        print(f"first handshakes {took:.1f}s after the mesh converged (seen at a 2-s tick)")
    took = wait_for(lambda: unreachable(pods, pods) == [], 15, "pods reaching each other")
    print(f"pods reach each other {took:.1f}s after that")
    return nodes, pods


def _wg_dump(node: Node) -> list[list[str]]:
    ifname = node.config()["WireGuardInterface"]
    out = sh("ip", "netns", "exec", node.netns, "wg", "show", ifname, "dump").stdout
    return [line.split("\t") for line in out.splitlines()[1:]]  # peers only


def _exchange_with_marker(a: Pod, b: Pod) -> None:
    for family in (0, 1):
        with Server(b.netns, "tcp", b.ips[family], 7780):
            sent = tcp_transfer(a.netns, b.ips[family], 7780, 256 * 1024, marker=MARKER)
            assert sent.ok and sent.source == a.ips[family], sent
        with Server(a.netns, "udp", a.ips[family], 7781):
            got = udp_exchange(b.netns, a.ips[family], 7781, 10, marker=MARKER)
            assert got.ok and got.source == b.ips[family], got


@pytest.mark.parametrize("encryption", ["wireguard", "off"])
def test_capture_sees_only_wireguard_when_on_and_the_marker_when_off(
    tmp_path: Path, encryption: str
) -> None:
    with Cluster(tmp_path, {"Encryption": encryption}) as cluster:
        nodes, pods = _two_nodes(cluster, encrypted=encryption == "wireguard")
        assert unreachable(pods, pods) == []
        node_ips = {n.node_ip for n in nodes}
        with Capture(f"/var/run/netns/{cluster.fabric}", nodes[0].fabric_port) as cap:
            _exchange_with_marker(pods[0], pods[1])
            # the mesh's own traffic: node 1's root namespace to a pod of node 2
            done = run_in(f"/var/run/netns/{nodes[0].netns}", sys.executable, "-c",
                          _NODE_SENDS.format(ip=pods[1].ips[0], marker=MARKER))
            assert done.returncode == 0, done.stderr
        crossing = cap.between(node_ips)
        assert len(crossing) > 20, len(crossing)  # the traffic really crossed the fabric
        if encryption == "off":
            assert cap.containing(MARKER.encode()), "the marker is on the wire in clear"
            assert {f.dport for f in crossing} >= {4789}  # VXLAN
            return
        assert cap.containing(MARKER.encode()) == []
        kinds = {(f.proto, f.sport, f.dport) for f in crossing}
        assert kinds == {("udp", WG_PORT, WG_PORT)}, kinds
        print(f"{len(cap.frames)} frames captured, {len(crossing)} between the nodes, all "
              f"UDP {WG_PORT} <-> {WG_PORT}; the marker in none")


# The node's own connection leaves with its overlay address (the WireGuard device's).
_NODE_SENDS = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(({marker!r} * 40).encode(), ({ip!r}, 9))
"""


def test_encrypted_pods_talk_and_the_key_stays_on_the_node(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    with Cluster(tmp_path, WG) as cluster:
        nodes, pods = _two_nodes(cluster)
        assert_pods_talk(pods[0], pods[1], mtu=POD_MTU)
        too_big = run_in(pods[0].netns, "ping", "-c1", "-W1", "-M", "do", "-s",
                         str(POD_MTU - 27), pods[1].ips[0])
        assert "message too long" in too_big.stdout + too_big.stderr, too_big

        key_file = nodes[0].dir / "state" / "wireguard.key"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        private = key_file.read_text().strip()
        assert len(base64.b64decode(private)) == 32
        public = subprocess.run(["wg", "pubkey"], input=private, capture_output=True,
                                text=True, check=True).stdout.strip()

        status, view = nodes[0].get("/v1/nodes")
        assert status == 200
        assert view["local"]["wireguard"]["publicKey"] == public
        device = view["wireguard"]
        assert device["publicKey"] == public and device["implementation"] == "wireguard-go"
        wait_for(lambda: _peer_seen(nodes[0]), 10, "a handshake in node 1's view")
        status, metrics = nodes[0].get_text("/metrics")
        assert 'vswitch_cni_wireguard_peer_rx_bytes{node="node-2"}' in metrics
        registry = _etcd_dump(cluster)
        for where, text in (("etcd", registry), ("REST", json.dumps(view)),
                            ("metrics", metrics), ("the log", nodes[0].log())):
            assert private not in text, where
        assert public in registry

        shown = nodes[0].operator("wireguard", "show")
        assert shown.returncode == 0, shown.stderr
        assert f"key {fingerprint(public)}" in shown.stdout and "peer node-2" in shown.stdout
        assert private not in shown.stdout

        table = _vswitchctl(cluster, "wireguard")
        record_property("vswitchctl_wireguard", table)
        print(table)
        assert "node-1" in table and "node-2" in table and "ago" in table


def _peer_seen(node: Node) -> bool:
    _, view = node.get("/v1/nodes")
    peers = view.get("wireguard", {}).get("peers", []) if isinstance(view, dict) else []
    return any(p["node"] and p["latestHandshake"] > 0 and p["rxBytes"] > 0 for p in peers)


def _etcd_dump(cluster: Cluster) -> str:
    def read() -> str:
        import urllib.request
        body = json.dumps({"key": base64.b64encode(b"\0").decode(),
                           "range_end": base64.b64encode(b"\0").decode()}).encode()
        req = urllib.request.Request(f"{ETCD_URL}/v3/kv/range", body)
        with urllib.request.urlopen(req, timeout=5) as resp:
            kvs = json.loads(resp.read()).get("kvs", [])
        return "\n".join(base64.b64decode(kv.get("value", "")).decode(errors="replace")
                         for kv in kvs)

    return in_netns(cluster.fabric, read)


def _vswitchctl(cluster: Cluster, *argv: str) -> str:
    done = subprocess.run(
        ["ip", "netns", "exec", cluster.nodes[0].netns, sys.executable, "-m", "vswitchctl",
         "--etcd", ETCD_URL, *argv], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_node_joins_and_leaves_during_traffic(tmp_path: Path) -> None:
    with Cluster(tmp_path, WG) as cluster:
        nodes, pods = _two_nodes(cluster)
        with Server(pods[1].netns, "udp", pods[1].ips[0], 7790):
            flow = Paced(pods[0].netns, "udp", pods[1].ips[0], 7790, 8)
            third = cluster.add_node()
            wait_for(lambda: converged([*nodes, third]), 30, "node-3 programmed everywhere")
            newcomer = third.add_pod()
            wait_for(lambda: unreachable(pods, [newcomer]) == [], 15, "node-3's pod reached")
            assert unreachable([newcomer], pods) == []
            third_key = third.get("/v1/nodes")[1]["local"]["wireguard"]["publicKey"]
            assert any(p[0] == third_key for p in _wg_dump(nodes[0]))

            third.stop_agent()
            out = nodes[0].operator("node", "remove", third.name, "--force")
            assert out.returncode == 0, out.stderr
            cluster.remove_node_namespace(third)
            wait_for(lambda: converged(nodes), 30, "node-3 gone from every view")
            for node in nodes:
                wait_for(partial(_peer_gone, node, third_key), 10,
                         f"node-3's peer gone from {node.name}")
                routes = sh("ip", "-n", node.netns, "route", "show", "proto", "118").stdout
                assert "10.1.3.0/24" not in routes, routes
            sent, answered, gap_ms = map(int, flow.result())
        print(f"node-1 -> node-2 while node-3 came and went: {answered}/{sent} answered, "
              f"longest gap {gap_ms} ms")
        # a bound for a loaded CI machine (here: none lost); without the mesh it would be all
        assert answered >= sent * 0.9 and gap_ms <= 2000, (sent, answered, gap_ms)


def _peer_gone(node: Node, key: str) -> bool:
    return all(p[0] != key for p in _wg_dump(node))


def test_a_strict_node_sends_nothing_in_clear_to_a_node_without_a_key(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        strict = cluster.add_node(Encryption="wireguard")
        clear = cluster.add_node()
        pods = [strict.add_pod(), clear.add_pod()]
        wait_for(lambda: clear.name in _failed(strict), 30, "node-2 refused by node-1")
        assert "publishes no WireGuard key" in _failed(strict)[clear.name]
        with Capture(f"/var/run/netns/{cluster.fabric}", strict.fabric_port) as cap:
            blocked = tcp_transfer(pods[0].netns, pods[1].ips[0], 7788, 64 * 1024, marker=MARKER)
            lost = udp_exchange(pods[0].netns, pods[1].ips[0], 7789, 3, marker=MARKER)
        assert not blocked.ok and not lost.ok
        assert cap.containing(MARKER.encode()) == []
        assert cap.between({strict.node_ip, clear.node_ip}) == []


def _failed(node: Node) -> dict[str, str]:
    _, view = node.get("/v1/nodes")
    if not isinstance(view, dict):
        return {}
    return {n["name"]: n["mesh"]["reason"] for n in view["nodes"]
            if n.get("mesh", {}).get("state") == "failed"}


def test_a_stale_peer_key_stops_traffic_and_sends_nothing_in_clear(tmp_path: Path) -> None:
    with Cluster(tmp_path, WG) as cluster:
        nodes, pods = _two_nodes(cluster)
        assert unreachable(pods, pods) == []
        assert nodes[0].process is not None
        nodes[0].process.send_signal(signal.SIGSTOP)  # node 1 cannot follow node 2's rotation
        try:
            out = nodes[1].operator("wireguard", "rotate")
            assert out.returncode == 0, out.stdout + out.stderr
            time.sleep(0.5)  # handshakes with the old key are gone on node 2
            with Capture(f"/var/run/netns/{cluster.fabric}", nodes[0].fabric_port) as cap:
                blocked = tcp_transfer(pods[0].netns, pods[1].ips[0], 7782, 64 * 1024,
                                       marker=MARKER)
                lost = udp_exchange(pods[1].netns, pods[0].ips[0], 7783, 3, marker=MARKER)
            assert not blocked.ok and not lost.ok
            assert cap.containing(MARKER.encode()) == []
            kinds = {(f.proto, f.sport, f.dport)
                     for f in cap.between({n.node_ip for n in nodes})}
            assert kinds <= {("udp", WG_PORT, WG_PORT)}, kinds
        finally:
            nodes[0].process.send_signal(signal.SIGCONT)
        wait_for(lambda: unreachable(pods, pods) == [], 20, "traffic after node 1 caught up")


def test_rotation_keeps_tcp_and_bounds_udp_loss(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    with Cluster(tmp_path, WG) as cluster:
        nodes, pods = _two_nodes(cluster)
        assert unreachable(pods, pods) == []
        before = nodes[0].get("/v1/nodes")[1]["local"]["wireguard"]["publicKey"]
        with Server(pods[1].netns, "tcp", pods[1].ips[0], 7784), \
                Server(pods[1].netns, "udp", pods[1].ips[0], 7785):
            tcp = Paced(pods[0].netns, "tcp", pods[1].ips[0], 7784, 8)
            udp = Paced(pods[0].netns, "udp", pods[1].ips[0], 7785, 8)
            time.sleep(3)
            out = nodes[0].operator("wireguard", "rotate")
            assert out.returncode == 0, out.stdout + out.stderr
            source, total, check = tcp.result()
            sent, answered, gap_ms = map(int, udp.result())
        after = nodes[0].get("/v1/nodes")[1]["local"]["wireguard"]["publicKey"]
        assert after != before
        assert source == pods[0].ips[0] and check == "ok" and "!=" not in total
        lost = sent - answered
        record_property("rotation_udp_lost", lost)
        record_property("rotation_udp_longest_gap_ms", gap_ms)
        print(f"rotation: TCP connection intact ({total} bytes); UDP {lost}/{sent} datagrams "
              f"lost, longest gap {gap_ms} ms")
        assert lost <= 600 and gap_ms <= 3000, (sent, answered, gap_ms)  # at most 3 s of it
        assert unreachable(pods, pods) == []
        assert all(p[0] != before for p in _wg_dump(nodes[1]))


def test_agent_restart_keeps_the_tunnels_and_duplicates_nothing(tmp_path: Path) -> None:
    with Cluster(tmp_path, WG) as cluster:
        nodes, pods = _two_nodes(cluster)
        key_before = nodes[0].get("/v1/nodes")[1]["local"]["wireguard"]["publicKey"]
        peers_before = [p[:4] for p in _wg_dump(nodes[0])]
        routes_before = nodes[0].mesh_state()["routes"]
        nodes[0].stop_agent(signal.SIGKILL)
        assert unreachable(pods, pods) == []  # the device outlives its agent
        nodes[0].start_agent()
        wait_for(lambda: converged(nodes), 30, "mesh after the restart")
        assert nodes[0].get("/v1/nodes")[1]["local"]["wireguard"]["publicKey"] == key_before
        assert [p[:4] for p in _wg_dump(nodes[0])] == peers_before
        assert nodes[0].mesh_state()["routes"] == routes_before
        assert_pods_talk(pods[0], pods[1], mtu=POD_MTU)


def test_rollout_on_a_running_cluster_keeps_pods_connected(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    # the pod MTU of the encrypted mesh from the start: pods made before the rollout keep theirs
    with Cluster(tmp_path, {"MTUSize": POD_MTU}) as cluster:
        nodes, pods = _two_nodes(cluster, encrypted=False)
        with Server(pods[1].netns, "tcp", pods[1].ips[0], 7786), \
                Server(pods[1].netns, "udp", pods[1].ips[0], 7787):
            tcp = Paced(pods[0].netns, "tcp", pods[1].ips[0], 7786, 20)
            udp = Paced(pods[0].netns, "udp", pods[1].ips[0], 7787, 20)
            started = time.monotonic()
            for mode in ("wireguard-permissive", "wireguard"):
                for node in nodes:
                    node.stop_agent()
                    node.extra["Encryption"] = mode
                    node.start_agent()
                    wait_for(lambda: converged(nodes), 30, f"mesh with {node.name} on {mode}")
                    # as an operator rolls a DaemonSet: the next node once this one carries
                    wait_for(lambda: unreachable(pods, pods) == [], 15, "pods reaching")
            took = time.monotonic() - started
            assert took < 18, f"the rollout took {took:.0f}s, longer than the traffic"
            source, total, check = tcp.result()
            sent, answered, gap_ms = map(int, udp.result())
        record_property("rollout_udp_lost", sent - answered)
        record_property("rollout_udp_longest_gap_ms", gap_ms)
        print(f"rollout in {took:.1f}s: TCP connection intact ({total} bytes); UDP "
              f"{sent - answered}/{sent} lost, longest gap {gap_ms} ms")
        assert source == pods[0].ips[0] and check == "ok" and "!=" not in total
        # a bound for a loaded CI machine (here: 6 lost, 30 ms); a restart that cut the mesh
        # for its duration would lose seconds of datagrams
        assert gap_ms <= 2000 and sent - answered <= 400, (sent, answered, gap_ms)
        for node in nodes:
            assert sh("ip", "-n", node.netns, "link", "show", "vxlan-vsw",
                      check=False).returncode != 0, f"VXLAN device left on {node.name}"
        with Capture(f"/var/run/netns/{cluster.fabric}", nodes[0].fabric_port) as cap:
            _exchange_with_marker(pods[0], pods[1])
        assert cap.containing(MARKER.encode()) == []
        assert {(f.proto, f.sport, f.dport) for f in cap.between({n.node_ip for n in nodes})} \
            == {("udp", WG_PORT, WG_PORT)}


def test_a_pod_mtu_that_leaves_no_room_for_wireguard_is_refused(tmp_path: Path) -> None:
    with Cluster(tmp_path, WG) as cluster:
        node = cluster.add_node(start=False, MTUSize=1450)
        node.start_agent(wait=False)
        assert node.process is not None
        assert node.process.wait(timeout=60) != 0
        assert "MTUSize 1450 does not fit the uplink eth0 (MTU 1500) over WireGuard" in node.log()
        assert "at most 1440" in node.log()

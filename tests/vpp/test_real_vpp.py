"""The driver against a real VPP: skipped unless VSWITCH_TEST_VPP_SOCKET names its API socket.

Plan (both wiring modes, dual stack): two pods wired and configured with agent.linux.pod_netns,
then what users send, through VPP:
- ping both ways, a 1 MiB TCP transfer checked end to end and UDP datagrams pod to pod, IPv4 and
  IPv6 (the checksums VPP must complete for veth pods);
- a pod to a TCP server on the node (the interconnect's Linux end), IPv4 and IPv6;
- on a fresh interconnect with nothing else sending, a pod to the node's main addresses (on
  another link, as eth0's), TCP and ping, IPv4 and IPv6: the node's answers leave with that
  source, so an ARP request for VPP's end would carry a sender VPP drops; Linux must hold VPP's
  end as a permanent neighbor;
- a pod to an "outside" host with no route back, through the agent's NAT table (egress);
- a pod to a Service address that the node DNATs (a stand-in for kube-proxy's rule) to the other
  pod: reset without the agent's service return-path rule, answered with it; and from the node;
- DEL of both leaves no pod interface, route or neighbor; teardown leaves no base object.
On a node without /dev/vhost-net, TAP mode is proven up to VPP accepting the request: VPP answers
-11 and the error tells the operator what to change. VPP runs in the machine's namespace, so
these tests use it (test-only subnets, interconnect names and NAT table names).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.dataplane.undo import UndoStack
from agent.dataplane.vpp import VppConfig, VppDataplane, interfaces, ip, names, neighbors
from agent.linux import hostnat, pod_netns
from agent.model.errors import DataplaneFailure
from agent.model.pod import PodNetwork
from testbed.netns import named_netns, ping, run_in, unique
from testbed.pods import vpp_pod as pod
from testbed.traffic import Server, tcp_transfer, udp_exchange

SOCKET = os.environ.get("VSWITCH_TEST_VPP_SOCKET", "")
pytestmark = [
    pytest.mark.vpp,
    pytest.mark.skipif(not SOCKET, reason="VSWITCH_TEST_VPP_SOCKET is not set (no real VPP)"),
]
V4, V6 = ipaddress.ip_network("10.251.1.0/24"), ipaddress.ip_network("fd00:251:1::/64")
NODE4, NODE6 = "172.31.251.2", "fd00:251:ff::2"  # the interconnect's Linux end
MAIN4, MAIN6 = "10.251.254.1", "fd00:251:fe::1"  # the node's "eth0" addresses, on a test link
SERVICE = "10.251.250.10"  # a ClusterIP stand-in, DNATed by the test's own table
OUT4, EDGE4 = "198.51.100.2", "198.51.100.1"  # an outside host and the node's side of its link
MACHINE_NS = f"/proc/{os.getpid()}/ns/net"


@pytest.fixture(params=["veth-afpacket", "tapv2", "veth-pool"])
def driver(request: pytest.FixtureRequest) -> Iterator[VppDataplane]:
    use_tap = request.param == "tapv2"
    if use_tap and not os.path.exists("/dev/vhost-net"):
        pytest.skip("no /dev/vhost-net on this node: VPP cannot create TAPs")
    suffix = secrets.token_hex(2)
    dp = VppDataplane(VppConfig(
        api_socket=SOCKET, use_tap=use_tap, pod_vrf_id=1,
        # veth-pool: the pods take ready pairs (agent/dataplane/vpp/podpool), DEL deletes later
        pod_pool=2 if request.param == "veth-pool" else 0,
        pod_gateways=(ipaddress.ip_interface(f"{V4[1]}/24"), ipaddress.ip_interface(f"{V6[1]}/64")),
        vpp_host_ip=ipaddress.ip_interface("172.31.251.1/24"),
        host_linux_ip=ipaddress.ip_interface(f"{NODE4}/24"),
        host_ifname=f"vswt{suffix}h", host_vpp_ifname=f"vswt{suffix}v",
    ))
    try:
        dp.start()
        subprocess.run(["ip", "addr", "add", f"{NODE6}/128", "dev", dp.cfg.host_ifname, "nodad"],
                       check=True)
        if dp.pool is not None:  # the pool's loop makes the spares the pods will take
            deadline = time.monotonic() + 30
            while dp.pool.ready() < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        yield dp
    finally:
        if dp.pool is not None:
            dp.pool.close()  # spares and pending deletes, VPP's interfaces first
        dp.teardown()  # VPP as the test found it: interconnect, loopback, routes, VRFs
        dp.close()


@dataclass
class Pods:
    a: PodNetwork
    b: PodNetwork
    ns_a: str
    ns_b: str


def dual(netns: str, n: int) -> PodNetwork:
    p = pod(netns, f"{V4[n]}/32")
    return PodNetwork(p.key, netns, (*p.addresses, ipaddress.ip_interface(f"{V6[n]}/128")),
                      (V4[1], V6[1]), p.mtu)


@pytest.fixture
def pods(driver: VppDataplane) -> Iterator[Pods]:
    with named_netns("tvr") as ns_a, named_netns("tvr") as ns_b:
        a, b = dual(ns_a, 21), dual(ns_b, 22)
        spares = driver.pool.hosts() if driver.pool is not None else []
        wa = driver.attach(a, UndoStack())
        wb = driver.attach(b, UndoStack())
        if driver.pool is not None:  # both pods on spares: their ends moved in and renamed
            assert [wa.host_ifname, wb.host_ifname] == spares
        try:
            pod_netns.configure(a, wa.gateway_mac)
            pod_netns.configure(b, wb.gateway_mac)
            yield Pods(a, b, ns_a, ns_b)
        finally:
            driver.detach(a, wa)
            driver.detach(b, wb)
        api = driver.api
        tags = {i.tag for i in interfaces.dump(api)}
        assert names.pod_tag(a.key) not in tags and names.pod_tag(b.key) not in tags
        for version, net in ((False, V4), (True, V6)):
            routes = ip.routes(api, 1, version)
            assert not {ipaddress.ip_network(net[n]) for n in (21, 22)} & set(routes)
        gone = {str(V4[21]), str(V4[22]), str(V6[21]), str(V6[22])}
        assert not any(nip in gone for _, nip in neighbors.dump(api))


def test_tcp_udp_and_ping_between_pods(pods: Pods) -> None:
    assert ping(pods.ns_a, str(V4[22])) and ping(pods.ns_b, str(V4[21]))
    assert ping(pods.ns_a, str(V6[22]))
    for addr in (str(V4[22]), str(V6[22])):
        with Server(pods.ns_b, "tcp", addr, 5001), Server(pods.ns_b, "udp", addr, 5002):
            tcp = tcp_transfer(pods.ns_a, addr, 5001)
            assert tcp.ok, tcp.detail
            assert tcp.source in (str(V4[21]), str(V6[21]))  # pod to pod: no translation
            udp = udp_exchange(pods.ns_a, addr, 5002)
            assert udp.ok, udp.detail


def test_pods_reach_a_server_on_the_node(pods: Pods) -> None:
    assert ping(pods.ns_a, NODE4) and ping(pods.ns_a, NODE6)
    for addr in (NODE4, NODE6):
        with Server(MACHINE_NS, "tcp", addr, 5003), Server(MACHINE_NS, "udp", addr, 5004):
            tcp = tcp_transfer(pods.ns_a, addr, 5003)
            assert tcp.ok, tcp.detail
            assert udp_exchange(pods.ns_a, addr, 5004).ok


@pytest.fixture
def main_addresses(driver: VppDataplane) -> Iterator[tuple[str, str]]:
    """MAIN4 and MAIN6 on a veth pair of their own in the machine's namespace (where the real
    VPP's interconnect is), as a node's main addresses are on eth0: not on the interconnect."""
    link = f"{driver.cfg.host_ifname[:-1]}m"
    subprocess.run(["ip", "link", "add", link, "type", "veth", "peer", "name",
                    f"{link[:-1]}n"], check=True)
    try:
        subprocess.run(["ip", "addr", "add", f"{MAIN4}/32", "dev", link], check=True)
        subprocess.run(["ip", "addr", "add", f"{MAIN6}/128", "dev", link, "nodad"], check=True)
        for end in (link, f"{link[:-1]}n"):
            subprocess.run(["ip", "link", "set", end, "up"], check=True)
        yield MAIN4, MAIN6
    finally:
        subprocess.run(["ip", "link", "del", link], capture_output=True, check=False)


def test_a_fresh_interconnect_lets_pods_reach_the_nodes_main_addresses(
    pods: Pods, main_addresses: tuple[str, str]
) -> None:
    """Nothing has crossed the new interconnect yet, so Linux has learnt no neighbor on it:
    the node's first packet towards VPP is its answer to the pod, sourced from the address the
    pod called (issue #23: the reply to 192.0.2.2 on eth0 was never sent)."""
    for port, addr in enumerate(main_addresses, start=5010):
        with Server(MACHINE_NS, "tcp", addr, port):
            tcp = tcp_transfer(pods.ns_a, addr, port)
            assert tcp.ok, f"{addr}: {tcp.detail}"
        assert ping(pods.ns_b, addr), addr


@pytest.fixture
def outside() -> Iterator[str]:
    with named_netns("tvo") as out:
        edge = unique("vsoe")
        subprocess.run(["ip", "link", "add", edge, "type", "veth", "peer", "name", "eth0",
                        "netns", out.rsplit("/", 1)[1]], check=True)
        try:
            subprocess.run(["ip", "addr", "add", f"{EDGE4}/24", "dev", edge], check=True)
            subprocess.run(["ip", "link", "set", edge, "up"], check=True)
            run_in(out, "ip", "addr", "add", f"{OUT4}/24", "dev", "eth0")
            run_in(out, "ip", "link", "set", "eth0", "up")
            yield out
        finally:
            subprocess.run(["ip", "link", "del", edge], capture_output=True, check=False)


@pytest.fixture
def nat(driver: VppDataplane) -> Iterator[hostnat.NatPlan]:
    plan = hostnat.NatPlan(
        pod_nets=(V4, V6), keep=(ipaddress.ip_network("10.251.0.0/16"), V6), external=True,
        service_return=True, table=f"vswitch-cni-test-{unique('')}",
    )
    try:
        yield plan
    finally:
        hostnat.remove(plan.table)


def test_pods_reach_the_outside_through_source_nat(
    pods: Pods, outside: str, nat: hostnat.NatPlan
) -> None:
    with Server(outside, "tcp", OUT4, 5005):
        assert not tcp_transfer(pods.ns_a, OUT4, 5005, 1000).ok  # no route back to pods
        hostnat.apply(nat)
        tcp = tcp_transfer(pods.ns_a, OUT4, 5005)
    assert tcp.ok and tcp.source == EDGE4, tcp.detail


@pytest.fixture
def service(pods: Pods, driver: VppDataplane) -> Iterator[str]:
    """What kube-proxy does for a ClusterIP: DNAT on the node (prerouting for pods, output for
    the node itself) to the backend pod b. The node's own connections need a route to the
    ClusterIP before OUTPUT's DNAT (a real node has its default route): one into the
    interconnect, so nothing of the test could ever leave the machine."""
    subprocess.run(["ip", "route", "add", f"{SERVICE}/32", "dev", driver.cfg.host_ifname],
                   check=True)
    table = f"test-kube-proxy-{unique('')}"
    target = f"{V4[22]}:5006"
    cmds = [f"add table ip {table}"]
    for hook, prio in (("prerouting", -100), ("output", -100)):
        cmds += [f"add chain ip {table} {hook} {{ type nat hook {hook} priority {prio} ; }}",
                 f"add rule ip {table} {hook} ip daddr {SERVICE} tcp dport 80 dnat to {target}"]
    subprocess.run(["nft", "-f", "-"], input="\n".join(cmds), text=True, check=True)
    try:
        yield SERVICE
    finally:
        subprocess.run(["nft", "delete", "table", "ip", table], check=False)


def test_service_replies_return_through_the_node(
    pods: Pods, service: str, nat: hostnat.NatPlan
) -> None:
    with Server(pods.ns_b, "tcp", "0.0.0.0", 5006):
        # From the node: the reply goes to the node's address, back through its conntrack.
        assert tcp_transfer(MACHINE_NS, service, 80, 1000).ok
        # From a pod, without the return-path rule: b answers a directly inside VPP, a never
        # asked b, the connection dies.
        assert not tcp_transfer(pods.ns_a, service, 80, 1000).ok
        hostnat.apply(nat)
        tcp = tcp_transfer(pods.ns_a, service, 80)
        assert tcp.ok and tcp.source == NODE4, tcp.detail
        # Hairpin: b to its own Service.
        assert tcp_transfer(pods.ns_b, service, 80, 1000).ok


def test_tap_on_a_node_without_vhost_net_is_refused_by_vpp_with_a_plain_hint(
    tmp_path: Path,
) -> None:
    """Where /dev/vhost-net is missing (these machines' kernels), TAP is proven up to VPP
    accepting the request: VPP itself answers -11 and the operator reads what to change."""
    if os.path.exists("/dev/vhost-net"):
        pytest.skip("this node has /dev/vhost-net: TAP mode is tested for real above")
    stand_in = tmp_path / "vhost-net"
    stand_in.write_text("")  # gets the driver past its own check, so that VPP decides
    suffix = secrets.token_hex(2)
    dp = VppDataplane(VppConfig(
        api_socket=SOCKET, use_tap=True, pod_vrf_id=1, vhost_net_path=str(stand_in),
        pod_gateways=(ipaddress.ip_interface("10.251.1.1/24"),),
        vpp_host_ip=None, host_linux_ip=None,
        host_ifname=f"vswt{suffix}h", host_vpp_ifname=f"vswt{suffix}v",
    ))
    try:
        dp.start()
        with named_netns("tvr") as ns:
            p = pod(ns, "10.251.1.31/32")
            undo = UndoStack()
            with pytest.raises(DataplaneFailure) as info:
                dp.attach(p, undo)
            undo.unwind()
            assert "retval -11" in str(info.value.details)
            assert "/dev/vhost-net" in str(info.value.details)
            assert "UseTAPInterfaces: false" in str(info.value.details)
            assert names.pod_tag(p.key) not in {i.tag for i in interfaces.dump(dp.api)}
    finally:
        dp.teardown()
        dp.close()

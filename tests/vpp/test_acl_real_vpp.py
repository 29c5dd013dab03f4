"""NetworkPolicy through VPP's acl plugin on a real VPP: skipped unless VSWITCH_TEST_VPP_SOCKET
names its API socket (the stats segment: VSWITCH_TEST_VPP_STATS, default /run/vpp/stats.sock).

Two dual-stack pods (veth + AF_PACKET) wired by the driver and configured as the agent does, a
VppPolicy on the same connection, real TCP and UDP between them through VPP, IPv4 and IPv6:
- ingress allowing one TCP and one UDP port from the other pod: those connect, another port and
  ping do not; the answers get back to a client whose own ingress denies everything (stateful);
- default deny ingress: nothing in, while the pod's own connections out work (their answers
  pass the deny-all output ACL through the sessions);
- egress deny: nothing out, while connections in work;
- the node's address reaches a pod that denies everything both ways, and that pod reaches it;
- an established TCP connection keeps working after a change that still allows it, and is cut
  by one that denies it (session reclassification);
- the per-rule counters move (the allowed rule and the default deny);
- a Service (DNAT on the node, as kube-proxy; the agent's return-path masquerade): a client whose
  egress allows nothing reaches a backend whose ingress allows nothing through the Service
  (judged on the node), and not directly.
VPP runs in the machine's namespace: the pods use test-only subnets and interconnect names.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from agent.dataplane.undo import UndoStack
from agent.dataplane.vpp import VppConfig, VppDataplane
from agent.dataplane.vpp.acl import PodAcl, VppPolicy
from agent.dataplane.vpp.stats import StatsSegment
from agent.linux import hostnat, pod_netns
from agent.model.pod import PodNetwork
from policy import DirectionRules, PodKey, PodPolicy, PortRange, Rule
from policy.model import IPAddress
from testbed.echo import listeners
from testbed.netns import entered, named_netns, ping, unique
from testbed.pods import dual_stack_pod

SOCKET = os.environ.get("VSWITCH_TEST_VPP_SOCKET", "")
STATS = os.environ.get("VSWITCH_TEST_VPP_STATS", "/run/vpp/stats.sock")
pytestmark = [
    pytest.mark.vpp,
    pytest.mark.skipif(not SOCKET, reason="VSWITCH_TEST_VPP_SOCKET is not set (no real VPP)"),
]
V4, V6 = ipaddress.ip_network("10.253.1.0/24"), ipaddress.ip_network("fd00:253:1::/64")
NODE4, NODE6 = "172.31.253.2", "fd00:253:ff::2"  # the interconnect's Linux end
SERVICES = ipaddress.ip_network("10.253.250.0/24")
SERVICE = "10.253.250.10"  # a ClusterIP stand-in, DNATed by the test's own table
KEY_A, KEY_B = PodKey("acl", "a"), PodKey("acl", "b")
OPEN, DENY = DirectionRules(False), DirectionRules(True)
WAIT = 1.5  # seconds a denied packet is given to arrive anyway


@dataclass
class Pod:
    key: PodKey
    net: PodNetwork
    ns: str
    sw_if_index: int

    @property
    def ips(self) -> tuple[str, str]:
        return str(self.net.addresses[0].ip), str(self.net.addresses[1].ip)

    def acl(self, ingress: DirectionRules = OPEN, egress: DirectionRules = OPEN) -> PodAcl:
        own: tuple[IPAddress, ...] = tuple(a.ip for a in self.net.addresses)
        return PodAcl(PodPolicy(self.key, (), ingress, egress), self.sw_if_index, own)


@dataclass
class Env:
    a: Pod
    b: Pod
    policy: VppPolicy


def dual(netns: str, n: int) -> PodNetwork:
    return dual_stack_pod(netns, V4, V6, n)


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    suffix = secrets.token_hex(2)
    dp = VppDataplane(VppConfig(
        api_socket=SOCKET, use_tap=False, pod_vrf_id=1,
        pod_gateways=(ipaddress.ip_interface(f"{V4[1]}/24"), ipaddress.ip_interface(f"{V6[1]}/64")),
        vpp_host_ip=ipaddress.ip_interface("172.31.253.1/24"),
        host_linux_ip=ipaddress.ip_interface(f"{NODE4}/24"),
        host_ifname=f"vswa{suffix}h", host_vpp_ifname=f"vswa{suffix}v",
    ))
    stats = StatsSegment(STATS) if os.path.exists(STATS) else None
    policy = VppPolicy(dp.api, (SERVICES,),
                       (ipaddress.ip_address(NODE4), ipaddress.ip_address(NODE6)), stats)
    try:
        dp.start()
        subprocess.run(["ip", "addr", "add", f"{NODE6}/128", "dev", dp.cfg.host_ifname, "nodad"],
                       check=True)
        with named_netns("tva") as ns_a, named_netns("tva") as ns_b:
            nets = dual(ns_a, 31), dual(ns_b, 32)
            wirings = [dp.attach(n, UndoStack()) for n in nets]
            try:
                for n, w in zip(nets, wirings, strict=True):
                    pod_netns.configure(n, w.gateway_mac)
                a, b = (Pod(k, n, n.netns, int(w.extra["sw_if_index"]))
                        for k, n, w in zip((KEY_A, KEY_B), nets, wirings, strict=True))
                yield Env(a, b, policy)
            finally:
                policy.apply({})
                for n, w in zip(nets, wirings, strict=True):
                    dp.detach(n, w)
    finally:
        if stats is not None:
            stats.close()
        dp.teardown()
        dp.close()


class Echo:
    """TCP and UDP echo servers on `port` at each address, in `ns` (threads of this process)."""

    def __init__(self, ns: str, addresses: tuple[str, ...], port: int) -> None:
        self.socks: list[socket.socket] = []
        self.received: list[bytes] = []
        with entered(ns):
            for tcp, udp in listeners(addresses, port):
                self.socks += [tcp, udp]
                threading.Thread(target=self._accept, args=(tcp,), daemon=True).start()
                threading.Thread(target=self._udp, args=(udp,), daemon=True).start()

    def _accept(self, ls: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = ls.accept()
                self.socks.append(conn)
                threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := conn.recv(4096):
                self.received.append(data)
                conn.sendall(data)

    def _udp(self, s: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                data, peer = s.recvfrom(4096)
                if peer is None:  # shut down by close()
                    return
                s.sendto(data, peer)

    def close(self) -> None:
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def __enter__(self) -> Echo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _family(addr: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def connect(ns: str, addr: str, port: int) -> socket.socket | None:
    """A TCP connection from `ns` that echoed one message, or None."""
    with entered(ns):
        s = socket.socket(_family(addr), socket.SOCK_STREAM)
    s.settimeout(WAIT)
    try:
        s.connect((addr, port))
        s.sendall(b"hello")
        if s.recv(16) == b"hello":
            return s
    except OSError:
        pass
    s.close()
    return None


def tcp_ok(ns: str, addr: str, port: int) -> bool:
    s = connect(ns, addr, port)
    if s is None:
        return False
    s.close()
    return True


def udp_ok(ns: str, addr: str, port: int) -> bool:
    with entered(ns):
        s = socket.socket(_family(addr), socket.SOCK_DGRAM)
    with s:
        s.settimeout(WAIT)
        for _ in range(2):  # one retry: a datagram may meet a neighbor not yet resolved
            s.sendto(b"ping", (addr, port))
            with contextlib.suppress(OSError):
                if s.recv(16) == b"ping":
                    return True
    return False


def allow(peer: Pod, *ports: PortRange) -> DirectionRules:
    peers = tuple(ipaddress.ip_network(ip) for ip in peer.ips)
    return DirectionRules(True, (Rule(peers, ports, ("acl/test",)),))


def tcp(port: int) -> PortRange:
    return PortRange("TCP", port, port)


def test_ingress_allows_its_ports_only_and_answers_return(env: Env) -> None:
    a, b = env.a, env.b
    env.policy.apply({
        b.key: b.acl(ingress=allow(a, tcp(5001), PortRange("UDP", 5001, 5001))),
        a.key: a.acl(ingress=DENY),  # a's answers come back only through its sessions
    })
    with Echo(b.ns, b.ips, 5001), Echo(b.ns, b.ips, 5002):
        for ip in b.ips:
            assert tcp_ok(a.ns, ip, 5001), ip
            assert udp_ok(a.ns, ip, 5001), ip
            assert not tcp_ok(a.ns, ip, 5002), ip
            assert not udp_ok(a.ns, ip, 5002), ip
            assert not ping(a.ns, ip), ip
    counted = env.policy.counters()
    if env.policy.stats is not None:
        by_reason: dict[str, int] = {}
        for c in counted[b.key]:
            if c.direction == "ingress":
                by_reason[c.rule.reason] = by_reason.get(c.rule.reason, 0) + c.packets
        assert by_reason["policy"] >= 4 and by_reason["default-deny"] >= 4, by_reason


def test_default_deny_ingress_and_egress_deny(env: Env) -> None:
    a, b = env.a, env.b
    env.policy.apply({b.key: b.acl(ingress=DENY)})
    with Echo(b.ns, b.ips, 5003), Echo(a.ns, a.ips, 5003):
        for ip_a, ip_b in zip(a.ips, b.ips, strict=True):
            assert not tcp_ok(a.ns, ip_b, 5003), ip_b
            assert tcp_ok(b.ns, ip_a, 5003) and udp_ok(b.ns, ip_a, 5003), ip_a
        env.policy.apply({b.key: b.acl(egress=DENY)})
        for ip_a, ip_b in zip(a.ips, b.ips, strict=True):
            assert not tcp_ok(b.ns, ip_a, 5003) and not udp_ok(b.ns, ip_a, 5003), ip_a
            assert tcp_ok(a.ns, ip_b, 5003) and udp_ok(a.ns, ip_b, 5003), ip_b


def test_the_node_is_always_allowed(env: Env) -> None:
    b = env.b
    env.policy.apply({b.key: b.acl(ingress=DENY, egress=DENY)})
    machine = f"/proc/{os.getpid()}/ns/net"
    with Echo(b.ns, b.ips, 5004), Echo(machine, (NODE4, NODE6), 5004):
        for ip_b, node in zip(b.ips, (NODE4, NODE6), strict=True):
            assert tcp_ok(machine, ip_b, 5004), ip_b  # the node's source: its interconnect end
            assert tcp_ok(b.ns, node, 5004) and udp_ok(b.ns, node, 5004), node
            assert ping(b.ns, node), node
        assert not tcp_ok(env.a.ns, b.ips[0], 5004)


def test_an_established_connection_is_cut_by_a_change_that_denies_it(env: Env) -> None:
    a, b = env.a, env.b
    env.policy.apply({b.key: b.acl(ingress=allow(a, tcp(5005)))})
    with Echo(b.ns, b.ips, 5005) as server:
        conns = [connect(a.ns, ip, 5005) for ip in b.ips]
        try:
            assert all(conns)
            env.policy.apply({b.key: b.acl(ingress=allow(a, tcp(5005), tcp(5006)))})
            for conn in conns:
                assert conn is not None
                conn.sendall(b"still")
                assert conn.recv(16) == b"still"  # a change that still allows it: kept
            env.policy.apply({b.key: b.acl(ingress=allow(a, tcp(5006)))})
            before = len(server.received)
            for conn in conns:
                assert conn is not None
                conn.sendall(b"after")
                with pytest.raises(TimeoutError):
                    conn.recv(16)
            assert len(server.received) == before  # nothing reached the server
        finally:
            for conn in conns:
                if conn is not None:
                    conn.close()


@pytest.fixture
def service(env: Env) -> Iterator[str]:
    """kube-proxy's DNAT of SERVICE:80 to b:5007 on the node, and the agent's NAT table with
    its Service return-path masquerade (docs/vpp.md)."""
    table = f"test-kube-proxy-{unique('')}"
    cmds = [f"add table ip {table}",
            f"add chain ip {table} prerouting {{ type nat hook prerouting priority -100 ; }}",
            f"add rule ip {table} prerouting ip daddr {SERVICE} tcp dport 80 "
            f"dnat to {env.b.ips[0]}:5007"]
    subprocess.run(["nft", "-f", "-"], input="\n".join(cmds), text=True, check=True)
    plan = hostnat.NatPlan(
        pod_nets=(V4, V6), keep=(ipaddress.ip_network("10.253.0.0/16"), V6), external=False,
        service_return=True, table=f"vswitch-cni-test-{unique('')}")
    try:
        hostnat.apply(plan)
        yield SERVICE
    finally:
        hostnat.remove(plan.table)
        subprocess.run(["nft", "delete", "table", "ip", table], check=False)


def test_service_traffic_is_left_to_the_node(env: Env, service: str) -> None:
    a, b = env.a, env.b
    env.policy.apply({a.key: a.acl(ingress=DENY, egress=DENY),
                      b.key: b.acl(ingress=DENY, egress=DENY)})
    with Echo(b.ns, b.ips, 5007):
        assert tcp_ok(a.ns, service, 80)  # a's input permits the Service, b's output the node
        assert not tcp_ok(a.ns, b.ips[0], 5007)

"""ClusterIPs translated by VPP's cnat plugin on a real VPP: skipped unless
VSWITCH_TEST_VPP_SOCKET names its API socket.

Three dual-stack pods (veth + AF_PACKET) wired by the driver with cnat on (`VppConfig.cnat`,
as `ServiceTranslation: vpp` makes it) and configured as the agent does; the renderer
(VppServices) on the same connection installs Service translations; real TCP and UDP between
the pods' namespaces through VPP, IPv4 and IPv6:
- a client reaches a ClusterIP's TCP and UDP port; the backend (another pod, its own port)
  sees the client pod's own address, and the client's answer comes from the ClusterIP; also
  with the backend beyond the VPP-host interconnect (as another node's pods are);
- the Service's backends change (one more): new connections reach both, in VPP only;
- ClientIP affinity (Maglev over the client's address): every connection of a client goes to
  one of two backends;
- a NodePort on the node's own address (a real IP: cnat interposes) is translated for its port,
  and the node keeps answering on its other ports;
- hairpin: a pod reaches a Service whose only backend is itself, and sees the node's hairpin
  address (the pod subnet's reserved last address) as the peer;
- a port the Service has no translation for, and the translations deleted: nothing is
  translated any more (the packet leaves VPP for the node, where no kube-proxy runs here);
- pod to pod and pod to gateway still work with cnat on the interfaces;
- with NetworkPolicy in the acl plugin too: a client whose ingress denies everything reaches
  a backend whose ingress allows it and whose egress denies everything (answers pass both
  ACLs on the sessions of the translated connection), a pod the backend does not allow does
  not, and the egress-isolated backend reaches itself through a Service (hairpin).
The test's pod VRF (7) is its own and so are its subnets and ClusterIPs (10.254.250.0/24,
fd00:254:250::/64); its translations and interfaces are removed at the end. cnat's SNAT entry
stays (it acts on cnat interfaces only, and there are none then): deleting it, an all-zero
`cnat_set_snat_addresses_v2`, crashed VPP 26.06 (SIGSEGV in cnat_client_free_by_ip) here.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest

from agent.dataplane.undo import UndoStack
from agent.dataplane.vpp import VppConfig, VppDataplane
from agent.dataplane.vpp.acl import PodAcl, VppPolicy
from agent.dataplane.vpp.cnat import VppServices
from agent.linux import pod_netns
from agent.model.pod import PodNetwork
from policy import DirectionRules, PodKey, PodPolicy, PortRange, Rule
from services import NODE_PORT, Backend, Translation, TranslationKey
from testbed.echo import listeners
from testbed.netns import entered, named_netns, ping
from testbed.pods import dual_stack_pod

SOCKET = os.environ.get("VSWITCH_TEST_VPP_SOCKET", "")
pytestmark = [
    pytest.mark.vpp,
    pytest.mark.skipif(not SOCKET, reason="VSWITCH_TEST_VPP_SOCKET is not set (no real VPP)"),
]
ip = ipaddress.ip_address
V4, V6 = ipaddress.ip_network("10.254.1.0/24"), ipaddress.ip_network("fd00:254:1::/64")
VIP4, VIP6 = ip("10.254.250.10"), ip("fd00:254:250::10")
HAIRPIN4, HAIRPIN6 = ip("10.254.250.11"), ip("fd00:254:250::11")
WAIT = 3.0
SERVICES4 = ipaddress.ip_network("10.254.250.0/24")
KEYS = [PodKey("cnat", n) for n in ("a", "b", "c")]
OPEN, DENY = DirectionRules(False), DirectionRules(True)


@dataclass
class Env:
    dp: VppDataplane
    services: VppServices
    nets: list[PodNetwork]
    sw_if_indexes: list[int]

    def acl(self, i: int, ingress: DirectionRules = OPEN,
            egress: DirectionRules = OPEN) -> PodAcl:
        own = tuple(a.ip for a in self.nets[i].addresses)
        return PodAcl(PodPolicy(KEYS[i], (), ingress, egress), self.sw_if_indexes[i], own)

    def ns(self, i: int) -> str:
        return self.nets[i].netns

    def ip(self, i: int, version: int = 4) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        return next(a.ip for a in self.nets[i].addresses if a.version == version)


def dual(netns: str, n: int) -> PodNetwork:
    return dual_stack_pod(netns, V4, V6, n)


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    suffix = secrets.token_hex(2)
    dp = VppDataplane(VppConfig(
        api_socket=SOCKET, use_tap=False, pod_vrf_id=7, cnat=True,
        pod_gateways=(ipaddress.ip_interface(f"{V4[1]}/24"), ipaddress.ip_interface(f"{V6[1]}/64")),
        vpp_host_ip=ipaddress.ip_interface("172.31.254.1/24"),
        host_linux_ip=ipaddress.ip_interface("172.31.254.2/24"),
        host_ifname=f"vswc{suffix}h", host_vpp_ifname=f"vswc{suffix}v",
    ))
    services = VppServices(dp.api, dp.ensure)
    try:
        dp.start()
        with named_netns("tvc") as a, named_netns("tvc") as b, named_netns("tvc") as c:
            nets = [dual(a, 21), dual(b, 22), dual(c, 23)]
            wirings = [dp.attach(n, UndoStack()) for n in nets]
            try:
                for n, w in zip(nets, wirings, strict=True):
                    pod_netns.configure(n, w.gateway_mac)
                yield Env(dp, services, nets, [int(w.extra["sw_if_index"]) for w in wirings])
            finally:
                services.apply({})
                for n, w in zip(nets, wirings, strict=True):
                    dp.detach(n, w)
    finally:
        dp.teardown()
        dp.close()


class Peers:
    """TCP and UDP servers on `port` at the pod's addresses that answer each client with the
    address they saw it come from (threads of this process, sockets in the pod's namespace)."""

    def __init__(self, ns: str | None, addresses: list[str], port: int) -> None:
        """`ns` None: the test's own namespace (the node's, where VPP's interconnect ends)."""
        self.socks: list[socket.socket] = []
        self.seen: list[str] = []
        with entered(ns) if ns else contextlib.nullcontext():
            for tcp, udp in listeners(addresses, port):
                self.socks += [tcp, udp]
                threading.Thread(target=self._tcp, args=(tcp,), daemon=True).start()
                threading.Thread(target=self._udp, args=(udp,), daemon=True).start()

    def _tcp(self, listening: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, peer = listening.accept()
                with conn:
                    self.seen.append(peer[0])
                    if conn.recv(64):
                        conn.sendall(f"peer={peer[0]}".encode())

    def _udp(self, s: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                data, peer = s.recvfrom(64)
                if not data:
                    return
                self.seen.append(peer[0])
                s.sendto(f"peer={peer[0]}".encode(), peer)

    def __enter__(self) -> Peers:
        return self

    def __exit__(self, *exc: object) -> None:
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def ask(ns: str, protocol: str, address: object, port: int) -> tuple[str, str] | None:
    """(what the server answered, where the answer came from), or None: no answer; addresses
    in Python's canonical text ("peer=fd00::1")."""
    got = _ask(ns, protocol, str(address), port)
    if got is None:
        return None
    answer, source = got
    if answer.startswith("peer="):
        answer = f"peer={ip(answer[5:])}"
    return answer, str(ip(source))


def _ask(ns: str, protocol: str, address: str, port: int) -> tuple[str, str] | None:
    addr = address
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with entered(ns):
        s = socket.socket(family, socket.SOCK_STREAM if protocol == "tcp" else socket.SOCK_DGRAM)
    with s:
        s.settimeout(WAIT)
        try:
            if protocol == "tcp":
                s.connect((addr, port))
                s.sendall(b"hi")
                return s.recv(64).decode(), s.getpeername()[0]
            for _ in range(2):  # one retry: a first datagram may meet an unresolved neighbor
                s.sendto(b"hi", (addr, port))
                with contextlib.suppress(TimeoutError):
                    data, peer = s.recvfrom(64)
                    return data.decode(), peer[0]
        except OSError:
            pass
    return None


def service(vip: object, port: int, protocol: str, *backends: tuple[object, int]
            ) -> dict[TranslationKey, Translation]:
    key = TranslationKey(ip(str(vip)), port, protocol)
    return {key: Translation(key, tuple(sorted(Backend(ip(str(a)), p) for a, p in backends)),
                             "test/web")}


def test_client_reaches_the_service_and_the_backend_sees_the_client(env: Env) -> None:
    client, backend = 0, 1
    want = {**service(VIP4, 80, "TCP", (env.ip(backend), 8080)),
            **service(VIP4, 53, "UDP", (env.ip(backend), 5353)),
            **service(VIP6, 80, "TCP", (env.ip(backend, 6), 8080)),
            **service(VIP6, 53, "UDP", (env.ip(backend, 6), 5353))}
    report = env.services.apply(want, [])
    assert report.failed == {} and report.created == 4
    addresses = [str(env.ip(backend)), str(env.ip(backend, 6))]
    with Peers(env.ns(backend), addresses, 8080) as tcp, Peers(env.ns(backend), addresses, 5353):
        for vip, version in ((VIP4, 4), (VIP6, 6)):
            me = str(env.ip(client, version))
            assert ask(env.ns(client), "tcp", vip, 80) == (f"peer={me}", str(vip))
            assert ask(env.ns(client), "udp", vip, 53) == (f"peer={me}", str(vip))
        assert ask(env.ns(client), "tcp", VIP4, 81) is None  # no translation for that port
        assert tcp.seen == [str(env.ip(client)), str(env.ip(client, 6))]
        # plain pod to pod, and the gateway, with cnat on every interface
        assert ask(env.ns(client), "tcp", env.ip(backend), 8080) == \
            (f"peer={env.ip(client)}", str(env.ip(backend)))
        assert ping(env.ns(client), str(V4[1])) and ping(env.ns(client), str(V6[1]))


def test_a_backend_beyond_the_interconnect(env: Env) -> None:
    """The node's end of the interconnect stands in for another node's pod: the translated
    packet leaves VPP by the main VRF's default route, the answer comes back through the
    interconnect (where cnat is on, in the host table) and is translated back for the client."""
    client, node = 0, "172.31.254.2"
    assert env.services.apply(service(VIP4, 80, "TCP", (ip(node), 8080)), []).failed == {}
    with Peers(None, [node], 8080) as far:
        assert ask(env.ns(client), "tcp", VIP4, 80) == (f"peer={env.ip(client)}", str(VIP4))
        assert far.seen == [str(env.ip(client))]
    env.services.apply({}, [])


def test_backends_change_in_place(env: Env) -> None:
    client = 0
    one = service(VIP4, 80, "TCP", (env.ip(1), 8080))
    both = service(VIP4, 80, "TCP", (env.ip(1), 8080), (env.ip(2), 8080))
    env.services.apply(one, [])
    assert env.services.apply(both, []).updated == 1
    with Peers(env.ns(1), [str(env.ip(1))], 8080) as b, \
            Peers(env.ns(2), [str(env.ip(2))], 8080) as c:
        answers = [ask(env.ns(client), "tcp", VIP4, 80) for _ in range(24)]
        assert all(a == (f"peer={env.ip(client)}", str(VIP4)) for a in answers), answers
        assert b.seen and c.seen  # 24 connections, two backends: both got some
    env.services.apply({}, [])
    assert ask(env.ns(client), "tcp", VIP4, 80) is None


def test_client_ip_affinity_keeps_a_client_on_one_backend(env: Env) -> None:
    # a port of its own: cnat's sessions of the other tests' connections to VIP4:80 live on
    # (30 s), and a new connection that reuses one's source port would follow it
    client = 0
    (key, spread), = service(VIP4, 81, "TCP", (env.ip(1), 8080), (env.ip(2), 8080)).items()
    env.services.apply({key: replace(spread, affinity=True)}, [])
    with Peers(env.ns(1), [str(env.ip(1))], 8080) as b, \
            Peers(env.ns(2), [str(env.ip(2))], 8080) as c:
        answers = [ask(env.ns(client), "tcp", VIP4, 81) for _ in range(24)]
        assert all(a == (f"peer={env.ip(client)}", str(VIP4)) for a in answers), answers
        # without affinity 24 connections reach both (test_backends_change_in_place)
        assert sorted((len(b.seen), len(c.seen))) == [0, 24]
    env.services.apply({}, [])


def test_a_node_port_on_the_nodes_own_address(env: Env) -> None:
    client, node = 0, "172.31.254.2"
    (key, t), = service(ip(node), 30080, "TCP", (env.ip(1), 8080)).items()
    assert env.services.apply({key: replace(t, kind=NODE_PORT)}, []).failed == {}
    with Peers(env.ns(1), [str(env.ip(1))], 8080) as backend, Peers(None, [node], 8081) as host:
        assert ask(env.ns(client), "tcp", node, 30080) == (f"peer={env.ip(client)}", node)
        assert ask(env.ns(client), "tcp", node, 8081) == (f"peer={env.ip(client)}", node)
        assert backend.seen == [str(env.ip(client))] and host.seen == [str(env.ip(client))]
    env.services.apply({}, [])


def test_hairpin_reaches_itself_through_the_service(env: Env) -> None:
    pod = 0
    want = {**service(HAIRPIN4, 80, "TCP", (env.ip(pod), 8080)),
            **service(HAIRPIN4, 53, "UDP", (env.ip(pod), 5353)),
            **service(HAIRPIN6, 80, "TCP", (env.ip(pod, 6), 8080))}
    assert env.services.apply(want, []).failed == {}
    addresses = [str(env.ip(pod)), str(env.ip(pod, 6))]
    with Peers(env.ns(pod), addresses, 8080), Peers(env.ns(pod), addresses, 5353):
        assert ask(env.ns(pod), "tcp", HAIRPIN4, 80) == ("peer=10.254.1.254", str(HAIRPIN4))
        assert ask(env.ns(pod), "udp", HAIRPIN4, 53) == ("peer=10.254.1.254", str(HAIRPIN4))
        assert ask(env.ns(pod), "tcp", HAIRPIN6, 80) == \
            (f"peer={ip('fd00:254:1::ffff:ffff:ffff:fffe')}", str(HAIRPIN6))
    env.services.apply({}, [])


def test_network_policy_judges_service_connections_in_vpp(env: Env) -> None:
    """With both plugins: the client's egress and the backend's ingress judge the connection
    with the backend's and the client's own addresses; the answers, translated back before the
    acl plugin sees them, still reach a client whose ingress denies everything and leave a
    backend whose egress does; a pod whose egress allows nothing reaches itself through a
    Service (hairpin)."""
    client, backend, other = 0, 1, 2
    policy = VppPolicy(env.dp.api, (SERVICES4,), (ip("172.31.254.2"),), self_egress=True)
    peers = tuple(ipaddress.ip_network(a.ip) for a in env.nets[client].addresses)
    allow = DirectionRules(True, (Rule(peers, (PortRange("TCP", 8080, 8080),
                                               PortRange("UDP", 5353, 5353)), ("t/p",)),))
    want = {**service(VIP4, 80, "TCP", (env.ip(backend), 8080)),
            **service(VIP4, 53, "UDP", (env.ip(backend), 5353)),
            **service(VIP6, 80, "TCP", (env.ip(backend, 6), 8080)),
            **service(HAIRPIN4, 80, "TCP", (env.ip(backend), 8080))}
    assert env.services.apply(want, []).failed == {}
    try:
        report = policy.apply({
            KEYS[client]: env.acl(client, ingress=DENY),
            KEYS[backend]: env.acl(backend, ingress=allow, egress=DENY)})
        assert report.failed == {}
        addresses = [str(env.ip(backend)), str(env.ip(backend, 6))]
        with Peers(env.ns(backend), addresses, 8080), Peers(env.ns(backend), addresses, 5353):
            for vip, version in ((VIP4, 4), (VIP6, 6)):
                me = str(env.ip(client, version))
                assert ask(env.ns(client), "tcp", vip, 80) == (f"peer={me}", str(vip))
            assert ask(env.ns(client), "udp", VIP4, 53) == (f"peer={env.ip(client)}", str(VIP4))
            assert ask(env.ns(other), "tcp", VIP4, 80) is None  # the backend's ingress
            assert ask(env.ns(backend), "tcp", HAIRPIN4, 80) == \
                (f"peer={ip('10.254.1.254')}", str(HAIRPIN4))
    finally:
        policy.apply({})
        env.services.apply({}, [])

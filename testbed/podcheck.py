"""What pods of a test cluster (testbed/cluster) must manage across nodes: echoes, TCP and UDP
as users send them, the pod MTU's largest packet and one byte more."""

from __future__ import annotations

from testbed.cluster import Pod
from testbed.netns import ping as netns_ping
from testbed.traffic import Server, tcp_transfer, udp_exchange


def ping(pod: Pod, address: str, size: int | None = None, df: bool = False) -> bool:
    """One echo from `pod` (testbed.netns.ping without retries: the mesh tests also expect
    silence, and a wait of 2 s per pair is enough on a converged mesh)."""
    return netns_ping(pod.netns, address, size=size, df=df, retry=False)


def unreachable(sources: list[Pod], targets: list[Pod]) -> list[str]:
    """Every (source, address) pair that does not answer a ping, both families."""
    return [f"{a.name}@{a.node.name} -> {ip}@{b.node.name}"
            for a in sources for b in targets if a is not b for ip in b.ips if not ping(a, ip)]


def assert_pods_talk(a: Pod, b: Pod, mtu: int = 1450) -> None:
    """What users send between two pods of a mesh of pod MTU `mtu`, both families: 1 MiB of
    TCP from a to b and 20 UDP datagrams from b to a, each arriving with its sender's address
    (no NAT), and a full-MTU ping with DF set crossing while one byte more does not."""
    for family in (0, 1):
        with Server(b.netns, "tcp", b.ips[family], 7777):
            sent = tcp_transfer(a.netns, b.ips[family], 7777)
            assert sent.ok and sent.source == a.ips[family], sent
        with Server(a.netns, "udp", a.ips[family], 7778):
            got = udp_exchange(b.netns, a.ips[family], 7778)
            assert got.ok and got.source == b.ips[family], got
    # ICMP payload = MTU - 28 bytes of headers (IPv6: 48)
    assert ping(a, b.ips[0], size=mtu - 28, df=True)
    assert ping(a, b.ips[1], size=mtu - 48, df=True)
    assert not ping(a, b.ips[0], size=mtu - 27, df=True)

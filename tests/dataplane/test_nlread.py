"""agent/linux/nlread reads what pyroute2 reads, on a real namespace.

Plan: in a fresh namespace with 60 veth pairs (dumps far larger than one receive buffer), an
alias, an MTU, v4 and v6 addresses, a permanent neighbor and routes in the main table and in
another, nlread's links, addresses, neighbors and routes equal pyroute2's view attribute by
attribute; the main-table filter keeps exactly the main table's routes; a lookup of a routed
address names the route's interface (like `ip route get`), an unroutable one raises the kernel's
errno; a missing link by name is None.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Iterator

import pytest

from agent.linux import iproute, netlink, nlread
from testbed.netns import named_netns, run_in

PAIRS = 60


@pytest.fixture
def busy_ns() -> Iterator[str]:
    with named_netns("trd") as ns:
        with iproute.pod_ns(ns) as ipr:
            for i in range(PAIRS):
                ipr.link("add", ifname=f"a{i}", kind="veth", peer={"ifname": f"b{i}"})
        commands = [
            ("link", "set", "a0", "up", "mtu", "1400", "alias", "vswitch-cni:x:eth0"),
            ("link", "set", "b0", "up"),
            ("addr", "add", "10.77.0.2/24", "dev", "a0"),
            ("addr", "add", "fd77::2/64", "dev", "a0", "nodad"),
            ("neigh", "replace", "10.77.0.9", "lladdr", "02:00:00:00:00:09", "dev", "a0",
             "nud", "permanent"),
            ("route", "add", "10.78.0.0/16", "via", "10.77.0.1", "dev", "a0"),
            ("route", "add", "10.79.0.5/32", "dev", "a0", "table", "100"),
            ("route", "add", "10.80.0.0/16", "dev", "a0", "table", "1000"),
        ]
        for command in commands:
            assert run_in(ns, "ip", *command).returncode == 0, command
        yield ns


@pytest.fixture
def reader(busy_ns: str) -> Iterator[nlread.Reader]:
    with netlink.pod_reader(busy_ns) as reader:
        yield reader


def test_links_match_pyroute2(busy_ns: str, reader: nlread.Reader) -> None:
    with iproute.pod_ns(busy_ns) as ipr:
        theirs = {
            m["index"]: (m.get_attr("IFLA_IFNAME"), m["flags"], m.get_attr("IFLA_MTU"),
                         m.get_attr("IFLA_ADDRESS"), m.get_attr("IFLA_OPERSTATE"),
                         m.get_attr("IFLA_IFALIAS"))
            for m in ipr.get_links()
        }
    ours = {ln.index: (ln.name, ln.flags, ln.mtu, ln.mac, ln.operstate, ln.alias)
            for ln in reader.links()}
    assert len(ours) == 2 * PAIRS + 1 and ours == theirs
    a0 = reader.link("a0")
    assert a0 is not None and (a0.mtu, a0.alias) == (1400, "vswitch-cni:x:eth0")
    assert reader.link("nothere") is None


def _ours(address: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bool:
    """Neighbors the test set up: the multicast ones (MLD's ff02::16, ...) the kernel adds on
    its own schedule, so two reads a moment apart may differ (CI saw one appear in between)."""
    return address is None or not address.is_multicast


def test_addresses_neighbors_routes_match_pyroute2(busy_ns: str, reader: nlread.Reader) -> None:
    with iproute.pod_ns(busy_ns) as ipr:
        addrs = {(a["index"], ipaddress.ip_address(a.get_attr("IFA_ADDRESS")), a["prefixlen"])
                 for a in ipr.get_addr()}
        neigh = {(n["ifindex"], ipaddress.ip_address(n.get_attr("NDA_DST")),
                  n.get_attr("NDA_LLADDR"), n["state"]) for n in ipr.get_neighbours()
                 if _ours(ipaddress.ip_address(n.get_attr("NDA_DST")))}
        routes = {(r.get_attr("RTA_TABLE"), r["dst_len"], r.get_attr("RTA_DST"),
                   r.get_attr("RTA_GATEWAY"), r.get_attr("RTA_OIF"))
                  for family in (socket.AF_INET, socket.AF_INET6)
                  for r in ipr.get_routes(family=family)}
    assert {(a.index, a.address, a.prefixlen) for a in reader.addresses()} == addrs
    assert ("10.77.0.2", 24) in {(str(a.address), a.prefixlen) for a in reader.addresses()}
    ours_neigh = {(n.index, n.dst, n.lladdr, n.state) for n in reader.neighbors(socket.AF_UNSPEC)
                  if _ours(n.dst)}
    assert ours_neigh == neigh and any(n[2] == "02:00:00:00:00:09" for n in ours_neigh)
    ours = {(r.table, r.dst_len, None if r.dst is None else str(r.dst),
             None if r.gateway is None else str(r.gateway), r.oif)
            for r in reader.routes(socket.AF_UNSPEC)}
    assert ours == routes and {t for t, *_ in ours} >= {100, 254, 255, 1000}
    main = reader.routes(socket.AF_UNSPEC, 254)
    assert main and {r.table for r in main} == {254}
    assert {r.table for r in reader.routes(socket.AF_INET, 1000)} == {1000}
    assert len(main) == sum(1 for r in ours if r[0] == 254)


def test_route_lookup(busy_ns: str, reader: nlread.Reader) -> None:
    a0 = reader.link("a0")
    found = reader.route_to(ipaddress.ip_address("10.78.3.4"))
    assert a0 is not None and found is not None
    assert (found.oif, str(found.gateway)) == (a0.index, "10.77.0.1")
    with pytest.raises(OSError) as err:
        reader.route_to(ipaddress.ip_address("192.0.2.1"))
    assert err.value.errno == errno.ENETUNREACH

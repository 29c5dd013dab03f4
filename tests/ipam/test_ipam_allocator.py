"""PodAllocator and NodeAllocator properties.

Test plan: no address is handed out twice; the reserved ones (network, gateway, last usable,
broadcast) never are; exhaustion comes exactly at capacity with a message naming the subnet;
release + allocate round trips; a just-released address is not reused at once; an IPv6 /64 and a
/16 cost no enumeration; reserve rebuilds the state and refuses reserved addresses. NodeAllocator:
a pod gets one address per family or none (a full family leaves the other untouched); reserve
sorts recorded addresses into its own and foreign ones.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipam import Exhausted, IPAddress, IPAMConfig, NodeAllocator, PodAllocator, node_networks


def _reserved(subnet: ipaddress.IPv4Network | ipaddress.IPv6Network) -> set[object]:
    last = subnet.num_addresses - 1
    return {subnet[0], subnet[1], subnet[last - 1], subnet[last]}


def _v4(prefix: int) -> PodAllocator:
    subnet = ipaddress.IPv4Network(f"10.1.7.0/{prefix}") if prefix >= 24 else \
        ipaddress.IPv4Network(f"10.0.0.0/{prefix}")
    return PodAllocator(subnet, subnet[1])


@given(st.integers(min_value=24, max_value=29))
def test_allocates_each_address_once_then_exhausts(prefix: int) -> None:
    alloc = _v4(prefix)
    seen = {alloc.allocate() for _ in range(alloc.capacity)}
    assert len(seen) == alloc.capacity == alloc.subnet.num_addresses - 4
    assert not seen & _reserved(alloc.subnet)
    assert all(ip in alloc.subnet for ip in seen)
    assert alloc.free == 0
    with pytest.raises(Exhausted) as info:
        alloc.allocate()
    assert str(alloc.subnet) in str(info.value)
    assert "PodNetworkPrefixLen" in str(info.value)
    assert info.value.code == 100


@settings(max_examples=50)
@given(st.lists(st.tuples(st.booleans(), st.integers(min_value=0, max_value=200)), max_size=300))
def test_random_allocate_release_keeps_invariants(ops: list[tuple[bool, int]]) -> None:
    alloc = _v4(24)
    held: list[IPAddress] = []
    for do_alloc, pick in ops:
        if do_alloc or not held:
            if alloc.free == 0:
                with pytest.raises(Exhausted):
                    alloc.allocate()
                continue
            ip = alloc.allocate()
            assert ip not in held and ip not in _reserved(alloc.subnet)
            held.append(ip)
        else:
            ip = held.pop(pick % len(held))
            assert alloc.release(ip)
        assert alloc.in_use == len(held)
        assert alloc.free == alloc.capacity - len(held)


def test_released_address_is_not_reused_at_once() -> None:
    alloc = _v4(24)
    first = alloc.allocate()
    alloc.release(first)
    assert alloc.allocate() != first


def test_release_then_allocate_round_trips_when_only_one_is_free() -> None:
    alloc = _v4(29)
    ips = [alloc.allocate() for _ in range(alloc.capacity)]
    alloc.release(ips[2])
    assert alloc.allocate() == ips[2]
    assert not alloc.release(ipaddress.IPv4Address("10.1.7.1"))  # gateway: never in use


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_ipv6_slash64_without_enumeration(start: int) -> None:
    subnet = ipaddress.IPv6Network("fd00:10:0:5::/64")
    alloc = PodAllocator(subnet, subnet[1])
    assert alloc.capacity == 2**64 - 4
    offset = max(2, min(start, 2**64 - 3))
    alloc.reserve(subnet[offset])  # moves the cursor anywhere in the space
    ips = {alloc.allocate() for _ in range(100)}
    assert len(ips) == 100 and not ips & _reserved(subnet)
    assert all(isinstance(ip, ipaddress.IPv6Address) and ip in subnet for ip in ips)


def test_slash16_full_cycle_wraps_around() -> None:
    alloc = _v4(16)
    ips = [alloc.allocate() for _ in range(1000)]
    for ip in ips[:500]:
        alloc.release(ip)
    alloc.reserve(alloc.subnet[65533])  # the highest usable: the walk must wrap
    nxt = alloc.allocate()
    assert nxt == alloc.subnet[2]  # wrapped past network and gateway to the first free


def test_reserve_refuses_reserved_and_foreign_addresses() -> None:
    alloc = _v4(24)
    for bad in ("10.1.7.0", "10.1.7.1", "10.1.7.254", "10.1.7.255", "10.1.8.5", "fd00::1"):
        with pytest.raises(ValueError, match=bad.replace(".", r"\.")):
            alloc.reserve(bad)
    alloc.reserve("10.1.7.9")
    alloc.reserve("10.1.7.9")  # idempotent
    assert alloc.in_use == 1 and alloc.is_used("10.1.7.9")
    assert alloc.allocate() == ipaddress.IPv4Address("10.1.7.10")


# ---- NodeAllocator: one address per family, all or none --------------------------------------

def _dual(v4_prefix: int, v6_prefix: int) -> NodeAllocator:
    """A dual-stack node (ID 1) whose pod subnets are a /v4_prefix and a /v6_prefix."""
    cfg, _ = IPAMConfig.from_mapping({
        "PodSubnetCIDR": "10.1.0.0/16", "PodNetworkPrefixLen": v4_prefix,
        "PodSubnetV6CIDR": "fd00:10::/96", "PodNetworkV6PrefixLen": v6_prefix})
    return NodeAllocator(node_networks(cfg, 1))


@settings(max_examples=60)
@given(st.integers(min_value=26, max_value=29), st.integers(min_value=122, max_value=125),
       st.lists(st.booleans(), max_size=120))
def test_node_allocator_gives_one_address_per_family_or_none(
        v4_prefix: int, v6_prefix: int, ops: list[bool]) -> None:
    nodes = _dual(v4_prefix, v6_prefix)
    capacity = min(int(str(u["capacity"])) for u in nodes.usage())
    held: list[list[str]] = []
    for allocate in ops:
        if allocate:
            try:
                got = nodes.allocate()
            except Exhausted as exc:
                assert len(held) == capacity  # only the smaller family's end stops it
                assert "is exhausted" in str(exc)
            else:
                assert [a.version for a in got] == [4, 6]
                assert all(a.network.prefixlen == a.max_prefixlen for a in got)
                held.append([str(a) for a in got])
        elif held:
            nodes.release(held.pop(0))
        in_use = [u["inUse"] for u in nodes.usage()]
        assert in_use == [len(held), len(held)]  # a failed allocate left no half behind
    flat = [a for pair in held for a in pair]
    assert len(set(flat)) == len(flat)
    assert nodes.exhausted() == (len(held) == capacity)
    while len(held) < capacity:  # then fill the node: the smaller family ends it
        held.append([str(a) for a in nodes.allocate()])
    with pytest.raises(Exhausted):
        nodes.allocate()
    assert [u["inUse"] for u in nodes.usage()] == [capacity, capacity]


def test_node_allocator_reserves_its_own_and_reports_the_foreign() -> None:
    nodes = _dual(28, 124)
    v4, v6 = (str(u["subnet"]) for u in nodes.usage())
    ours = [f"{ipaddress.ip_network(v4)[5]}/32", f"{ipaddress.ip_network(v6)[5]}/128"]
    foreign = ["10.99.0.5/32", "fd00:99::5/128"]
    assert nodes.reserve(ours + foreign) == foreign
    assert [u["inUse"] for u in nodes.usage()] == [1, 1]
    assert all(nodes.owns(a) for a in ours) and not any(nodes.owns(a) for a in foreign)
    got = nodes.allocate()
    assert not {str(a) for a in got} & set(ours)
    nodes.release(ours + foreign)  # the foreign ones are no error
    assert [u["inUse"] for u in nodes.usage()] == [1, 1]

"""PodAllocator properties.

Test plan: no address is handed out twice; the reserved ones (network, gateway, last usable,
broadcast) never are; exhaustion comes exactly at capacity with a message naming the subnet;
release + allocate round trips; a just-released address is not reused at once; an IPv6 /64 and a
/16 cost no enumeration; reserve rebuilds the state and refuses reserved addresses.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipam import Exhausted, IPAddress, PodAllocator


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

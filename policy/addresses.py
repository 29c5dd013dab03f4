"""Sets of IPv4 and IPv6 addresses as sorted, disjoint, non-adjacent integer intervals.

One number line holds both families: an IPv4 address is its integer, an IPv6 address its
integer plus V6_BASE (2**33, so the two families never touch and never merge). A set is a tuple
of inclusive (first, last) intervals in canonical form: equal sets are equal tuples, which is
what lets the compiler merge, compare and memoize them. `networks` turns a set into the fewest
CIDRs that cover it exactly (both renderers take prefixes: nftables interval sets, VPP ACLs).
"""

from __future__ import annotations

import bisect
import heapq
import ipaddress
from collections.abc import Iterable

from policy.model import IPAddress, IPNetwork

Interval = tuple[int, int]
AddressSet = tuple[Interval, ...]

V6_BASE = 1 << 33
_V4_LAST = (1 << 32) - 1
EMPTY: AddressSet = ()
EVERY_ADDRESS: AddressSet = ((0, _V4_LAST), (V6_BASE, V6_BASE + (1 << 128) - 1))


def point(ip: IPAddress) -> int:
    return int(ip) + (V6_BASE if ip.version == 6 else 0)


def address(p: int) -> IPAddress:
    """The address at point `p` (point's inverse)."""
    return ipaddress.IPv6Address(p - V6_BASE) if p >= V6_BASE else ipaddress.IPv4Address(p)


def of_addresses(ips: Iterable[IPAddress]) -> AddressSet:
    return normalize((p, p) for p in map(point, ips))


def of_network(net: IPNetwork) -> AddressSet:
    first = point(net.network_address)
    return ((first, first + net.num_addresses - 1),)


def normalize(intervals: Iterable[Interval]) -> AddressSet:
    """The canonical form of any intervals: sorted, overlapping and adjacent ones merged."""
    return _merged(sorted(intervals))


def union(sets: Iterable[AddressSet]) -> AddressSet:
    return _merged(heapq.merge(*sets))  # each set is sorted already


def _merged(ordered: Iterable[Interval]) -> AddressSet:
    """Intervals in order of their first address, overlapping and adjacent ones merged."""
    out: list[Interval] = []
    for first, last in ordered:
        if out and first <= out[-1][1] + 1:
            if last > out[-1][1]:
                out[-1] = (out[-1][0], last)
        else:
            out.append((first, last))
    return tuple(out)


def subtract(base: AddressSet, holes: AddressSet) -> AddressSet:
    out: list[Interval] = []
    for first, last in base:
        start = first
        for hole_first, hole_last in holes:
            if hole_last < start or hole_first > last:
                continue
            if hole_first > start:
                out.append((start, hole_first - 1))
            start = hole_last + 1
            if start > last:
                break
        if start <= last:
            out.append((start, last))
    return tuple(out)


def contains(addresses: AddressSet, ip: IPAddress) -> bool:
    p = point(ip)
    i = bisect.bisect_right(addresses, (p, 1 << 200)) - 1
    return i >= 0 and addresses[i][0] <= p <= addresses[i][1]


def issubset(inner: AddressSet, outer: AddressSet) -> bool:
    return union((inner, outer)) == outer


def networks(addresses: AddressSet) -> tuple[IPNetwork, ...]:
    """The fewest CIDRs covering exactly `addresses`, IPv4 first, each family ascending."""
    out: list[IPNetwork] = []
    for first, last in addresses:
        if first <= _V4_LAST:
            out.extend(ipaddress.summarize_address_range(ipaddress.IPv4Address(first),
                                                         ipaddress.IPv4Address(last)))
        else:
            out.extend(ipaddress.summarize_address_range(
                ipaddress.IPv6Address(first - V6_BASE), ipaddress.IPv6Address(last - V6_BASE)))
    return tuple(out)

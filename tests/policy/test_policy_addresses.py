"""Address sets (policy.addresses) against plain Python sets of addresses on a small universe.

Test plan: on random CIDRs inside 10.0.0.0/26 and fd00::/122 (small enough to enumerate):
- normalize/union/subtract give exactly the set operations, in canonical form (sorted,
  disjoint, never adjacent), so equal sets are equal tuples whatever the input order;
- contains agrees with membership at, inside and beside every interval edge;
- networks covers exactly the set, IPv4 first, with no two CIDRs that one larger CIDR would
  cover (the fewest);
- the two families never merge (the last IPv4 address and the first IPv6 one are apart);
- `address` is `point`'s inverse over both families' whole ranges.
"""

from __future__ import annotations

import ipaddress
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from policy import addresses
from policy.addresses import AddressSet

Net = ipaddress.IPv4Network | ipaddress.IPv6Network
V4 = ipaddress.ip_network("10.0.0.0/26")
V6 = ipaddress.ip_network("fd00::/122")


@st.composite
def networks_(draw: st.DrawFn) -> Net:
    base = draw(st.sampled_from([V4, V6]))
    prefix = draw(st.integers(base.prefixlen, base.max_prefixlen))
    subnets: list[Net] = list(base.subnets(new_prefix=prefix))
    return draw(st.sampled_from(subnets))


def _members(nets: list[Net]) -> set[object]:
    return {a for n in nets for a in n}


def _of(nets: list[Net]) -> AddressSet:
    return addresses.union(addresses.of_network(n) for n in nets)


def _canonical(s: AddressSet) -> bool:
    return all(a[0] <= a[1] for a in s) and all(a[1] + 1 < b[0] for a, b in pairwise(s))


def _expand(s: AddressSet) -> set[object]:
    return _members(list(addresses.networks(s)))


@settings(max_examples=300)
@given(st.lists(networks_(), max_size=6), st.lists(networks_(), max_size=6))
def test_set_operations_are_exact_and_canonical(a: list[Net], b: list[Net]) -> None:
    sa, sb = _of(a), _of(b)
    assert _canonical(sa) and _canonical(sb)
    shuffled = list(reversed(a))
    assert addresses.normalize(iv for n in shuffled for iv in addresses.of_network(n)) == sa
    union = addresses.union((sa, sb))
    assert _canonical(union) and _expand(union) == _members(a) | _members(b)
    diff = addresses.subtract(sa, sb)
    assert _canonical(diff) and _expand(diff) == _members(a) - _members(b)
    assert addresses.issubset(diff, sa)
    assert addresses.issubset(sa, sb) == (_members(a) <= _members(b))


@settings(max_examples=200)
@given(st.lists(networks_(), max_size=6))
def test_contains_and_networks(nets: list[Net]) -> None:
    s = _of(nets)
    members = _members(nets)
    probes: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = {V4[0], V4[-1], V6[0], V6[-1]}
    for first, last in s:
        for p in (first - 1, first, last, last + 1):
            if p >= addresses.V6_BASE:
                probes.add(ipaddress.IPv6Address(p - addresses.V6_BASE))
            elif 0 <= p < 1 << 32:
                probes.add(ipaddress.IPv4Address(p))
    for ip in probes:
        assert addresses.contains(s, ip) == (ip in members), ip
    cidrs = addresses.networks(s)
    assert _members(list(cidrs)) == members
    keys = [(n.version, int(n.network_address)) for n in cidrs]
    assert keys == sorted(keys)
    for x, y in pairwise(cidrs):
        mergeable = x.version == y.version and x.prefixlen == y.prefixlen \
            and x.supernet() == y.supernet()
        assert not mergeable, (x, y)


def test_the_families_never_touch() -> None:
    last_v4 = addresses.of_network(ipaddress.ip_network("255.255.255.255/32"))
    first_v6 = addresses.of_network(ipaddress.ip_network("::/128"))
    both = addresses.union((last_v4, first_v6))
    assert len(both) == 2
    assert addresses.networks(both) == (ipaddress.ip_network("255.255.255.255/32"),
                                        ipaddress.ip_network("::/128"))
    assert addresses.networks(addresses.EVERY_ADDRESS) == (ipaddress.ip_network("0.0.0.0/0"),
                                                           ipaddress.ip_network("::/0"))


@settings(max_examples=200)
@given(st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)))
def test_address_is_the_inverse_of_point(ip: ipaddress.IPv4Address | ipaddress.IPv6Address
                                         ) -> None:
    assert addresses.address(addresses.point(ip)) == ip
    assert type(addresses.address(addresses.point(ip))) is type(ip)

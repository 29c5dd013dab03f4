"""A node's pod addresses: `PodAllocator` hands out the next free address of one pod subnet (round
robin, small, never enumerating the subnet); `NodeAllocator` gives a pod one address per family of
the node, all or none.

Addresses are kept as offsets from the network address: a set of the offsets in use and a cursor at
the last one handed out. `allocate` walks forward from the cursor (wrapping), so an address just
released is reused only after every other free one has been (a late packet or a stale ARP entry for
a dead pod then does not reach the next pod). A walk visits at most `in_use + 4` offsets, so a /16
or an IPv6 /64 costs no more than a /24; memory is one int per address in use.

Never handed out (as Contiv): host 0 (network / subnet-router anycast), the gateway, the last usable
address (reserved, Contiv's NAT loopback) and the last address (IPv4 broadcast).
Thread-safe: the agent allocates for different pods in parallel.

The allocators hold no truth of their own: the agent rebuilds them from its stored pod records at
start (`reserve`) and hands an address to a pod only once its allocation is stored.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterable

from ipam._parse import Exhausted, IPAddress, IPNetwork
from ipam.subnets import IPInterface, NodeNetworks


class PodAllocator:
    """Allocates pod addresses of one subnet; rebuilt from the store with `reserve`."""

    def __init__(self, subnet: IPNetwork, gateway: IPAddress) -> None:
        self.subnet = subnet
        self.gateway = gateway
        size = subnet.num_addresses
        # a subnet of fewer than 4 addresses holds no pod at all
        self._reserved = {0, size - 2, size - 1} if size >= 4 else set(range(size))
        if gateway in subnet:
            self._reserved.add(int(gateway) - int(subnet.network_address))
        self._size = size
        self._used: set[int] = set()
        self._cursor = 0  # offset handed out last; the walk starts after it
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        """How many pods the subnet holds."""
        return max(self._size - len(self._reserved), 0)

    @property
    def in_use(self) -> int:
        return len(self._used)

    @property
    def free(self) -> int:
        return self.capacity - self.in_use

    def allocate(self) -> IPAddress:
        """The next free address after the last one handed out; raises Exhausted when full."""
        with self._lock:
            if len(self._used) >= self.capacity:
                raise Exhausted(
                    f"pod subnet {self.subnet} is exhausted: all {self.capacity} usable "
                    "addresses are in use",
                    "delete pods on this node, or give nodes a larger pod subnet "
                    "(a shorter PodNetworkPrefixLen)")
            offset = self._cursor
            while True:
                offset = (offset + 1) % self._size
                if offset not in self._used and offset not in self._reserved:
                    break
            self._used.add(offset)
            self._cursor = offset
            return self._address(offset)

    def reserve(self, ip: IPAddress | str) -> None:
        """Marks `ip` used (idempotent): rebuilding state from the store after a restart."""
        offset = self._offset(ip)
        if offset in self._reserved:
            raise ValueError(f"{ip} is reserved in pod subnet {self.subnet} "
                             f"(network, gateway {self.gateway}, or one of the last two)")
        with self._lock:
            self._used.add(offset)
            # continue after the highest restored address, as Contiv did after a resync
            self._cursor = max(self._cursor, offset)

    def release(self, ip: IPAddress | str) -> bool:
        """Frees `ip`; False if it was not in use (a repeated DEL is no error)."""
        offset = self._offset(ip)
        with self._lock:
            if offset not in self._used:
                return False
            self._used.discard(offset)
            return True

    def is_used(self, ip: IPAddress | str) -> bool:
        return self._offset(ip) in self._used

    def _offset(self, ip: IPAddress | str) -> int:
        address = ipaddress.ip_address(ip) if isinstance(ip, str) else ip
        if address.version != self.subnet.version or address not in self.subnet:
            raise ValueError(f"{ip} is not inside pod subnet {self.subnet}")
        return int(address) - int(self.subnet.network_address)

    def _address(self, offset: int) -> IPAddress:
        value = int(self.subnet.network_address) + offset
        if self.subnet.version == 4:
            return ipaddress.IPv4Address(value)
        return ipaddress.IPv6Address(value)  # ip_address() would read a small int as IPv4


class NodeAllocator:
    """One address per address family of the node for each pod: one `PodAllocator` per pod
    subnet, behind one lock so that a pod gets all its addresses or none."""

    def __init__(self, networks: NodeNetworks) -> None:
        self._lock = threading.Lock()
        self._allocators = [
            PodAllocator(subnet, gateway)
            for subnet, gateway in zip(networks.pod_subnets, networks.gateways, strict=True)
        ]
        self.gateways: tuple[IPAddress, ...] = tuple(networks.gateways)

    def allocate(self) -> list[IPInterface]:
        """One host address (/32 or /128) per family; raises Exhausted, taking none, when any
        family's subnet is full."""
        taken: list[IPAddress] = []
        with self._lock:
            try:
                for allocator in self._allocators:
                    taken.append(allocator.allocate())
            except Exhausted:
                for allocator, ip in zip(self._allocators, taken, strict=False):
                    allocator.release(ip)
                raise
        return [ipaddress.ip_interface(f"{ip}/{ip.max_prefixlen}") for ip in taken]

    def release(self, addresses: Iterable[str | IPInterface]) -> None:
        """Frees the addresses; one outside the node's subnets, or not in use, is no error."""
        with self._lock:
            for address in addresses:
                ip = ipaddress.ip_interface(address).ip
                for allocator in self._allocators:
                    if ip in allocator.subnet:
                        allocator.release(ip)

    def reserve(self, addresses: Iterable[str | IPInterface]) -> list[str]:
        """Marks recorded addresses as used; returns those outside this node's pod subnets."""
        foreign: list[str] = []
        with self._lock:
            for address in addresses:
                ip = ipaddress.ip_interface(address).ip
                owner = next((a for a in self._allocators if ip in a.subnet), None)
                if owner is None:
                    foreign.append(str(address))
                else:
                    owner.reserve(ip)
        return foreign

    def owns(self, address: str | IPInterface) -> bool:
        """Whether `address` lies in one of this node's pod subnets."""
        ip = ipaddress.ip_interface(address).ip
        return any(ip in a.subnet for a in self._allocators)

    def exhausted(self) -> bool:
        with self._lock:
            return any(a.free == 0 for a in self._allocators)

    def usage(self) -> list[dict[str, object]]:
        with self._lock:
            return [
                {
                    "subnet": str(a.subnet),
                    "capacity": a.capacity,
                    "inUse": a.in_use,
                    "free": a.free,
                }
                for a in self._allocators
            ]

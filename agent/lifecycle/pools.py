"""The node's pod address pools: one IPAM allocator per address family, behind one lock.

The allocators are pure (ipam/); etcd stays the source of truth. The pools are rebuilt from the
pod records at start, and an address taken here is only handed to a pod once its allocation key
is written in etcd (agent/lifecycle/pods does both in one step and undoes the first if the second
fails).
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterable

from agent.model.errors import IPAMFailure
from agent.model.pod import IPAddress, IPInterface
from ipam import Exhausted, NodeNetworks, PodAllocator


class Pools:
    """Allocates one address per family for each pod."""

    def __init__(self, networks: NodeNetworks) -> None:
        self._lock = threading.Lock()
        self._allocators = [
            PodAllocator(subnet, gateway)
            for subnet, gateway in zip(networks.pod_subnets, networks.gateways, strict=True)
        ]
        self.gateways: tuple[IPAddress, ...] = tuple(networks.gateways)

    def allocate(self) -> list[IPInterface]:
        """One host address (/32 or /128) per family; all or nothing."""
        taken: list[IPAddress] = []
        with self._lock:
            try:
                for allocator in self._allocators:
                    taken.append(allocator.allocate())
            except Exhausted as exc:
                for allocator, ip in zip(self._allocators, taken, strict=False):
                    allocator.release(ip)
                raise IPAMFailure("no free pod address on this node", str(exc)) from exc
        return [ipaddress.ip_interface(f"{ip}/{ip.max_prefixlen}") for ip in taken]

    def release(self, addresses: Iterable[str | IPInterface]) -> None:
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

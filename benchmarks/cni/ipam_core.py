"""Figure 6: the pure IPAM core (ipam.PodAllocator) on a /16 node subnet, in process, no I/O.

- fill: allocate every usable address of an empty /16 (65532); allocations/s per run.
- churn: in a /16 kept 90% full, release a random address and allocate one, repeatedly
  (a busy node's steady state: the walk must skip the used offsets); operations/s per run.
- memory (tracemalloc, measured apart from the timed runs, since tracing slows allocation):
  what the allocator retains with the /16 full, in total and per address in use.
"""

from __future__ import annotations

import ipaddress
import random
import time
import tracemalloc
from dataclasses import dataclass

from ipam import PodAllocator

SUBNET = ipaddress.IPv4Network("10.1.0.0/16")
GATEWAY = ipaddress.IPv4Address("10.1.0.1")


@dataclass(frozen=True)
class IpamFigures:
    fill_per_s: list[float]
    churn_per_s: list[float]
    capacity: int
    retained_bytes: int
    peak_bytes: int


def _fill() -> tuple[PodAllocator, float]:
    allocator = PodAllocator(SUBNET, GATEWAY)
    start = time.perf_counter()
    for _ in range(allocator.capacity):
        allocator.allocate()
    return allocator, allocator.capacity / (time.perf_counter() - start)


def _churn(operations: int, rng: random.Random) -> float:
    allocator = PodAllocator(SUBNET, GATEWAY)
    held = [allocator.allocate() for _ in range(allocator.capacity * 9 // 10)]
    start = time.perf_counter()
    for _ in range(operations):
        index = rng.randrange(len(held))
        allocator.release(held[index])
        held[index] = allocator.allocate()
    return operations / (time.perf_counter() - start)


def run(runs: int, churn_operations: int) -> IpamFigures:
    rng = random.Random(7)
    fill = [_fill()[1] for _ in range(runs)]
    churn = [_churn(churn_operations, rng) for _ in range(runs)]
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        allocator, _ = _fill()
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return IpamFigures(fill, churn, allocator.capacity, after - before, peak - before)

"""Figures 1 and 2: CNI ADD / CHECK / DEL through libcni, sequential and 16 runtimes at once.

Sequential: each run takes a fresh pod namespace and does ADD, CHECK, DEL on it, ours and the
reference alternating (ours first in even runs, the reference first in odd ones) so that load
changes on the machine hit both alike; warm-up runs (the reference's first ADD creates its bridge)
are not counted. Namespaces are made and removed outside the timed calls.

Throughput: N pod namespaces are made first, then N ADDs are run by 16 threads, each exec'ing the
driver (a runtime each); pods/s = N / wall time from the first exec to the last exit. Then the
same 16 threads DEL them all (also timed).
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from benchmarks.core.harness import CniNetwork, Namespaces, Pod
from benchmarks.core.stats import Summary

VERBS = ("ADD", "CHECK", "DEL")
RUNTIMES = 16


def quiet_delete(net: CniNetwork, pod: Pod) -> None:
    # best effort on the way out; the namespace goes anyway
    with contextlib.suppress(Exception):
        net.delete(pod)


def sequential(nets: Sequence[CniNetwork], namespaces: Namespaces, runs: int,
               warmup: int) -> dict[str, dict[str, list[float]]]:
    """label -> verb -> the latencies in ms, one per counted run (`summarize` makes the
    figures; the samples are kept for the distributions' picture)."""
    times: dict[str, dict[str, list[float]]] = {n.label: {v: [] for v in VERBS} for n in nets}
    for i in range(warmup + runs):
        order = list(nets) if i % 2 == 0 else list(reversed(nets))
        for net in order:
            pod = net.new_pod(namespaces)
            try:
                add = net.add(pod)
                check = net.check(pod)
                delete = net.delete(pod)
            except BaseException:
                quiet_delete(net, pod)
                raise
            finally:
                namespaces.remove(pod.netns)
            if i >= warmup:
                for verb, ms in zip(VERBS, (add, check, delete), strict=True):
                    times[net.label][verb].append(ms)
    return times


def summarize(samples: Mapping[str, Mapping[str, Sequence[float]]]
              ) -> dict[str, dict[str, Summary]]:
    """label -> verb -> latency summary in ms, from `sequential`'s samples."""
    return {label: {verb: Summary.of(values, "ms") for verb, values in by_verb.items()}
            for label, by_verb in samples.items()}


@dataclass(frozen=True)
class Throughput:
    pods: int
    add_pods_per_s: float
    del_pods_per_s: float
    add_latency: list[float]
    del_latency: list[float]
    # CPU milliseconds per pod: "runtime" = every exec'd process (nsenter, driver, plugins),
    # plus one entry per long-running server process (agent, etcd) named in `servers`
    add_cpu_ms: dict[str, float]
    del_cpu_ms: dict[str, float]


def process_cpu_s(pid: int) -> float:
    """utime + stime of a running process, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _all(pool: ThreadPoolExecutor, fn: Callable[[Pod], float], pods: Sequence[Pod],
         servers: Mapping[str, int]) -> tuple[float, list[float], dict[str, float]]:
    """Runs fn over the pods; wall seconds, latencies, CPU ms per pod by consumer."""
    cpu_before = {name: process_cpu_s(pid) for name, pid in servers.items()}
    children_before = _children_cpu_s()
    start = time.perf_counter()
    latencies = list(pool.map(fn, pods))
    wall = time.perf_counter() - start
    cpu = {"runtime (driver + plugins)": _children_cpu_s() - children_before}
    cpu.update({name: process_cpu_s(pid) - cpu_before[name] for name, pid in servers.items()})
    return wall, latencies, {name: s * 1000 / len(pods) for name, s in cpu.items()}


def throughput(net: CniNetwork, namespaces: Namespaces, count: int,
               servers: Mapping[str, int]) -> Throughput:
    """`count` ADDs by 16 concurrent runtimes, then DELs of them all. `servers`: processes
    whose CPU time is charged to the run (the agent, etcd)."""
    pods = [net.new_pod(namespaces) for _ in range(count)]
    added = False
    try:
        with ThreadPoolExecutor(max_workers=RUNTIMES) as pool:
            add_wall, add_lat, add_cpu = _all(pool, net.add, pods, servers)
            added = True
            del_wall, del_lat, del_cpu = _all(pool, net.delete, pods, servers)
    except BaseException:
        if not added:
            for pod in pods:
                quiet_delete(net, pod)
        raise
    finally:
        for pod in pods:
            namespaces.remove(pod.netns)
    return Throughput(count, count / add_wall, count / del_wall, add_lat, del_lat, add_cpu,
                      del_cpu)


def add_pods(net: CniNetwork, namespaces: Namespaces, count: int) -> list[Pod]:
    """Adds `count` pods with 16 runtimes and leaves them in place (reconcile and RSS figures)."""
    pods = [net.new_pod(namespaces) for _ in range(count)]
    with ThreadPoolExecutor(max_workers=RUNTIMES) as pool:
        list(pool.map(net.add, pods))
    return pods


def delete_pods(net: CniNetwork, namespaces: Namespaces, pods: Sequence[Pod]) -> None:
    with ThreadPoolExecutor(max_workers=RUNTIMES) as pool:
        list(pool.map(lambda pod: quiet_delete(net, pod), pods))
    for pod in pods:
        namespaces.remove(pod.netns)

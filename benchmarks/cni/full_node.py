"""ADD and DEL on a full node: the latency of one more pod when 100+ pods are already live.

A node's first pods are cheap for any dataplane; what an operator feels is the 101st pod. The
pods are added one at a time through libcni (as a runtime does) and stay in place; the ADDs made
while at least `live` pods were up are the figure. Then the same pods are deleted one at a time,
the DELs made while at least `live` remained being the DEL figure. MemAvailable is read before the
first ADD and after the last: its drop per pod is the kernel memory a pod costs (veth pair,
AF_PACKET rings with VPP, routes), with the agent's and VPP's own growth included.

Run by benchmarks.cni.suite for the kernel dataplane and, when VPP is reachable, for VPP.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.cni.verbs import quiet_delete
from benchmarks.core import agent_metrics
from benchmarks.core.harness import (
    CniNetwork,
    Namespaces,
    Pod,
    PodSubnets,
    agent_running,
    bench_agent_config,
    ours_network,
    plugin_bin_dir,
    remove_agent_links,
)
from benchmarks.core.stats import Summary
from testbed.agent import AgentHandle
from testbed.etcd import EtcdServer
from testbed.libcni import DEFAULT_BUILD_DIR, build_driver


@dataclass(frozen=True)
class AtScale:
    live: int  # pods already up when a measured ADD ran (at least)
    add: Summary  # ms, ADDs with >= live pods up
    delete: Summary  # ms, DELs with >= live pods still up
    memory_mib_per_pod: float  # MemAvailable drop per pod over the whole fill
    # VPP only: the packet-socket rings VPP has mapped with the node full, per interface
    ring_mib_per_interface: float | None = None
    interfaces: int = 0
    churn: Summary | None = None  # ms, ADDs of pods replacing pods (`run`'s churn), if any


def mem_available_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/meminfo has no MemAvailable")


def server_pid(unix_socket: str) -> int | None:
    """The process listening on the unix socket at `unix_socket` (VPP's API socket)."""
    inodes = set()
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7] == unix_socket:
            inodes.add(f"socket:[{fields[6]}]")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                return int(proc.name)
        except OSError:
            continue
    return None


def socket_mappings_kib(pid: int) -> list[int]:
    """Sizes of the process's shared mappings of sockets: for VPP, its AF_PACKET rings (the
    kernel's ring memory, mapped whole into VPP), one per interface."""
    sizes: list[int] = []
    mapping_is_socket = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:  # a mapping's first line
            mapping_is_socket = head[-1].startswith("socket:[") and head[1].endswith("s")
        elif mapping_is_socket and line.startswith("Size:"):
            sizes.append(int(head[1]))
    return sizes


def run(net: CniNetwork, namespaces: Namespaces, live: int, measured: int,
        vpp_socket: str = "", churn: int = 0) -> AtScale:
    """Fills the node to `live` pods, then measures `measured` more ADDs and as many DELs.
    `vpp_socket`: VPP's API socket, to read its ring mappings with the node full. `churn`:
    before the DELs, that many pods replace pods, as a rollout does: the oldest pod's DEL, then
    a new pod's ADD (measured), the node staying full."""
    pods: list[Pod] = []
    adds: list[float] = []
    deletes: list[float] = []
    replaced: list[float] = []
    before = mem_available_kib()
    try:
        for i in range(live + measured):
            pod = net.new_pod(namespaces)
            pods.append(pod)
            ms = net.add(pod)
            if i >= live:
                adds.append(ms)
        drop_mib = (before - mem_available_kib()) / 1024
        pid = server_pid(vpp_socket) if vpp_socket else None
        rings = socket_mappings_kib(pid) if pid else []
        for _ in range(churn):
            old = pods.pop(0)
            net.delete(old)
            namespaces.remove(old.netns)
            pod = net.new_pod(namespaces)
            pods.append(pod)
            replaced.append(net.add(pod))
        while pods:
            pod = pods.pop()
            ms = net.delete(pod)
            namespaces.remove(pod.netns)
            if len(pods) >= live:
                deletes.append(ms)
    finally:
        for pod in pods:
            quiet_delete(net, pod)
            namespaces.remove(pod.netns)
    return AtScale(live, Summary.of(adds, "ms"), Summary.of(deletes, "ms"),
                   drop_mib / (live + measured),
                   sum(rings) / len(rings) / 1024 if rings else None, len(rings),
                   Summary.of(replaced, "ms") if replaced else None)


@dataclass
class Bench:
    """Around the agents measured one after the other: a real etcd, the libcni driver and the
    plugin, the runtime's namespace, the node's pods' namespaces and subnets."""

    tmp: Path
    etcd_endpoints: list[str]
    driver: Path
    bin_dir: Path
    host_ns: Path
    namespaces: Namespaces
    subnets: PodSubnets


@contextmanager
def bench(prefix: str) -> Iterator[Bench]:
    tmp = Path(tempfile.mkdtemp(prefix=f"vcni-bench-{prefix}-{os.getpid()}-"))
    namespaces = Namespaces()
    with ExitStack() as stack, EtcdServer() as etcd:
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        stack.callback(namespaces.close)
        yield Bench(tmp, etcd.endpoints, build_driver(DEFAULT_BUILD_DIR), plugin_bin_dir(tmp),
                    namespaces.create(), namespaces, PodSubnets())


@dataclass(frozen=True)
class AgentAtScale:
    """One agent's figures at scale, and its histograms over the run (agent_metrics.delta)."""

    figures: AtScale
    phases: dict[str, agent_metrics.Histogram]
    vpp_calls: dict[str, agent_metrics.Histogram]


@contextmanager
def agent_network(b: Bench, name: str, extra: dict[str, object]
                  ) -> Iterator[tuple[AgentHandle, CniNetwork]]:
    """An agent of its own with config `extra` (on a fresh subnet) and the libcni network
    that reaches it; its links are removed afterwards."""
    config = bench_agent_config(b.tmp, b.etcd_endpoints, b.subnets.take(), extra)
    try:
        with agent_running(b.tmp, config, name) as agent:
            yield agent, ours_network(b.driver, b.bin_dir, b.tmp, b.host_ns, agent, name)
    finally:
        remove_agent_links(config)


def measure_agent(b: Bench, name: str, extra: dict[str, object], live: int, measured: int,
                  vpp_socket: str = "", churn: int = 0) -> AgentAtScale:
    """`run` against an agent of its own with config `extra` (on a fresh subnet)."""
    with agent_network(b, name, extra) as (agent, net):
        before = agent_metrics.snapshot(agent)
        figures = run(net, b.namespaces, live, measured, vpp_socket, churn)
        after = agent_metrics.snapshot(agent)
    return AgentAtScale(figures, agent_metrics.delta(before, after, agent_metrics.PHASES),
                        agent_metrics.delta(before, after, agent_metrics.VPP_CALLS))


def main() -> None:
    """Alone: python3 -m benchmarks.cni.full_node [--live N] [--measured M] (VPP too when
    VSWITCH_TEST_VPP_SOCKET names a running VPP's API socket)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--live", type=int, default=100)
    parser.add_argument("--measured", type=int, default=30)
    args = parser.parse_args()
    socket = os.environ.get("VSWITCH_TEST_VPP_SOCKET", "")
    setups: dict[str, dict[str, object]] = {"kernel": {}}
    if socket:
        setups["vpp"] = {"Dataplane": "vpp", "VPPAPISocket": socket, "UseTAPInterfaces": False}
    with bench("scale") as b:
        for name, extra in setups.items():
            res = measure_agent(b, f"scale-{name}", extra, args.live, args.measured,
                                socket if name == "vpp" else "").figures
            print(f"{name}: ADD at >= {res.live} live pods: median {res.add.median:.1f} ms "
                  f"(p99 {res.add.p99:.1f}, n={res.add.n}); DEL median {res.delete.median:.1f} ms;"
                  f" MemAvailable drop {res.memory_mib_per_pod:.2f} MiB/pod; VPP rings per "
                  f"interface {res.ring_mib_per_interface} MiB ({res.interfaces} interfaces)")


if __name__ == "__main__":
    main()

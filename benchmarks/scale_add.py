"""ADD and DEL on a full node: the latency of one more pod when 100+ pods are already live.

A node's first pods are cheap for any dataplane; what an operator feels is the 101st pod. The
pods are added one at a time through libcni (as a runtime does) and stay in place; the ADDs made
while at least `live` pods were up are the figure. Then the same pods are deleted one at a time,
the DELs made while at least `live` remained being the DEL figure. MemAvailable is read before the
first ADD and after the last: its drop per pod is the kernel memory a pod costs (veth pair,
AF_PACKET rings with VPP, routes), with the agent's and VPP's own growth included.

Run by benchmarks.run for the kernel dataplane and, when VPP is reachable, for VPP.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmarks.cni_bench import quiet_delete
from benchmarks.harness import CniNetwork, Namespaces, Pod
from benchmarks.stats import Summary


@dataclass(frozen=True)
class AtScale:
    live: int  # pods already up when a measured ADD ran (at least)
    add: Summary  # ms, ADDs with >= live pods up
    delete: Summary  # ms, DELs with >= live pods still up
    memory_mib_per_pod: float  # MemAvailable drop per pod over the whole fill


def mem_available_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/meminfo has no MemAvailable")


def run(net: CniNetwork, namespaces: Namespaces, live: int, measured: int) -> AtScale:
    """Fills the node to `live` pods, then measures `measured` more ADDs and as many DELs."""
    pods: list[Pod] = []
    adds: list[float] = []
    deletes: list[float] = []
    before = mem_available_kib()
    try:
        for i in range(live + measured):
            pod = net.new_pod(namespaces)
            pods.append(pod)
            ms = net.add(pod)
            if i >= live:
                adds.append(ms)
        drop_mib = (before - mem_available_kib()) / 1024
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
                   drop_mib / (live + measured))


def main() -> None:
    """Alone: python3 -m benchmarks.scale_add [--live N] [--measured M] (VPP too when
    VSWITCH_TEST_VPP_SOCKET names a running VPP's API socket)."""
    import argparse
    import os
    import shutil
    import tempfile
    from contextlib import ExitStack

    from benchmarks.harness import (
        PodSubnets,
        agent_running,
        bench_agent_config,
        ours_network,
        plugin_bin_dir,
        remove_agent_links,
    )
    from tests.helpers.etcd import EtcdServer
    from tests.libcni import DEFAULT_BUILD_DIR, build_driver

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--live", type=int, default=100)
    parser.add_argument("--measured", type=int, default=30)
    args = parser.parse_args()
    socket = os.environ.get("VSWITCH_TEST_VPP_SOCKET", "")
    setups: dict[str, dict[str, object]] = {"kernel": {}}
    if socket:
        setups["vpp"] = {"Dataplane": "vpp", "VPPAPISocket": socket, "UseTAPInterfaces": False}
    tmp = Path(tempfile.mkdtemp(prefix=f"vcni-bench-scale-{os.getpid()}-"))
    namespaces = Namespaces()
    subnets = PodSubnets()
    with ExitStack() as stack, EtcdServer() as etcd:
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        stack.callback(namespaces.close)
        driver = build_driver(DEFAULT_BUILD_DIR)
        bin_dir = plugin_bin_dir(tmp)
        host_ns = namespaces.create()
        for name, extra in setups.items():
            config = bench_agent_config(tmp, etcd.endpoints, subnets.take(), extra)
            try:
                with agent_running(tmp, config, f"scale-{name}") as agent:
                    net = ours_network(driver, bin_dir, tmp, host_ns, agent, f"scale-{name}")
                    res = run(net, namespaces, args.live, args.measured)
            finally:
                remove_agent_links(config)
            print(f"{name}: ADD at >= {res.live} live pods: median {res.add.median:.1f} ms "
                  f"(p99 {res.add.p99:.1f}, n={res.add.n}); DEL median {res.delete.median:.1f} ms;"
                  f" MemAvailable drop {res.memory_mib_per_pod:.2f} MiB/pod")


if __name__ == "__main__":
    main()

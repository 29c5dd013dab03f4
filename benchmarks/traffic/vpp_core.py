"""Pod traffic on a node whose VPP has a CPU of its own (issue #25), beside the kernel dataplane
given the same CPU for its pods: the placement VPP's deployments use, measured on two cores.

    python -m benchmarks run vpp-core [--quick] [--setup NAME ...] [--pods-cpu N] [--vpp-cpu N]
                                  [--out BENCHMARKS.md] [--json FILE]

The one-machine cluster (testbed/cluster.py: node IPs set, so the node mesh is on), pods
added through the real `vswitch-cni`, and benchmarks/traffic/mesh.py's rows: on one node, pods a
and b: TCP a -> b in IPv4 and IPv6, TCP to a stand-in ClusterIP backed by b (kube-proxy's DNAT
on the node, testbed/service.py), RTT, UDP loss at 1 Gbit/s offered; on two nodes (the
`-2-nodes` setups), a on the first and b on the second: the same rows across. Across nodes
each node's VPP would need a CPU of its own, three CPUs in all with the pods'; this machine has
two, so both VPPs share the one VPP CPU there. Each setup also reports how busy every CPU was
during one more TCP IPv4 run (/proc/stat): which CPU bounds it, and that run's Gbit/s per busy
CPU (its Gbit/s over the sum of the CPUs' busy shares: what one CPU's worth of work carries).

Each setup (SETUPS) is the agent config and where the work runs. The benchmark pins itself
to the pods' CPU (`--pods-cpu`, 0) while a setup runs, so everything it starts (etcd, the
agent, iperf3 and ping in the pods) runs there; a setup's VPP is then moved, every thread of
it, to its CPU (`--vpp-cpu`, 1; the pods' CPU for `vpp-shared`). `kernel-any-cpu` pins
nothing: the pods' sender and receiver get a CPU each, as mesh_traffic measures the kernel.
The ratios are over `kernel` (`kernel-2-nodes` for the rows across; the pods' CPU only): the
same CPU for the pods, and VPP's CPU on top, as a node that gives VPP a core has it. VPP
setups need the VSWITCH_TEST_VPP_START / _STOP / _MESH_SOCKET variables (testbed/vpp_nodes.py)
and are skipped with a note without them.

Writes its own section of --out between markers (full mode's default is BENCHMARKS.md; quick
mode writes only where --out says), and its picture, vpp-core.svg, into docs/benchmarks/ beside
that file. Traffic goes only to the namespaces it creates; everything it starts is removed
again, also on failure.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.core import machine, plots
from benchmarks.core.netperf import IPERF_PORT
from benchmarks.core.sections import markers
from benchmarks.traffic.mesh import (
    SERVICE_IP,
    add_report_options,
    check_report_options,
    lacks_vpp,
    log,
    measure,
    measure_once,
    report,
    setup_cluster,
)
from benchmarks.traffic.mesh_report import ROWS, Counts, Row, SetupResult, cell, compare
from testbed.cluster import Node, converged, wait_for
from testbed.podcheck import unreachable
from testbed.service import DnatService
from testbed.vpp import VppProbe
from testbed.vpp_nodes import VppNodes

BEGIN, END = markers("vpp-core")
BASELINE = "kernel"
ONE_NODE_ROWS = tuple(r for r in ROWS if "across" not in r.key)
ACROSS_ROWS = tuple(r for r in ROWS if "across" in r.key)
BUSY = "CPUs busy during one more TCP IPv4 run"
PER_CPU = "Gbit/s per busy CPU in that run"  # its Gbit/s over the sum of the busy shares
PLOT = "vpp-core"  # the section's picture: docs/benchmarks/vpp-core.svg beside --out


@dataclass(frozen=True)
class Setup:
    name: str
    config: dict[str, Any]  # the agent's keys beside the cluster's own
    pinned: bool  # everything on the pods' CPU (else anywhere)
    vpp: str = ""  # "", "pods" (VPP on the pods' CPU) or "own" (on --vpp-cpu)
    nodes: int = 1  # 2: pods on both, the rows across (each node's VPP on the same CPU)

    def describe(self, pods_cpu: int, vpp_cpu: int) -> str:
        where = f"pods on CPU {pods_cpu}" if self.pinned else "pods on any CPU"
        if self.vpp:
            which = "both nodes' VPPs" if self.nodes == 2 else "VPP"
            where += f", {which} on CPU {pods_cpu if self.vpp == 'pods' else vpp_cpu}"
        return where


VPP_KEYS = {"Dataplane": "vpp", "VXLANOwner": "linux"}
SETUPS = (
    Setup("kernel", {"Dataplane": "kernel"}, pinned=True),
    Setup("kernel-any-cpu", {"Dataplane": "kernel"}, pinned=False),
    Setup("vpp-shared", dict(VPP_KEYS), pinned=True, vpp="pods"),
    Setup("vpp-own-core", dict(VPP_KEYS), pinned=True, vpp="own"),
    Setup("vpp-own-core-polling", {**VPP_KEYS, "InterfaceRxMode": "polling"}, pinned=True,
          vpp="own"),
    Setup("kernel-2-nodes", {"Dataplane": "kernel"}, pinned=True, nodes=2),
    Setup("vpp-own-core-2-nodes", dict(VPP_KEYS), pinned=True, vpp="own", nodes=2),
)


def cpu_times() -> dict[str, tuple[int, int]]:
    """Per CPU of /proc/stat: (all jiffies, idle and iowait jiffies)."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name != "cpu":
            ticks = [int(f) for f in fields]
            out[name] = (sum(ticks), ticks[3] + ticks[4])
    return out


def busy_shares(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
                ) -> dict[str, float]:
    """How busy each CPU was between two readings of cpu_times, 0 to 1."""
    out = {}
    for cpu, (total, idle) in after.items():
        spent = total - before[cpu][0]
        out[cpu] = (spent - (idle - before[cpu][1])) / max(spent, 1)
    return out


def busy(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> str:
    """How busy each CPU was between two readings of cpu_times, e.g. `cpu0 37 %, cpu1 100 %`."""
    return ", ".join(f"{cpu} {100 * share:.0f} %"
                     for cpu, share in busy_shares(before, after).items())


@contextmanager
def placed(cpus: set[int] | None) -> Iterator[None]:
    """The calling thread, and so every process it starts meanwhile, on `cpus` (None: as it
    was); its own affinity again after."""
    before = os.sched_getaffinity(0)
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def move(pid: int, cpus: set[int]) -> str:
    """Every thread of process `pid` onto `cpus`; what its main thread may run on now."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)
    return cpus_allowed(pid)


def cpus_allowed(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise RuntimeError(f"no Cpus_allowed_list for process {pid}")


def vpp_pid(vpps: VppNodes, node: Node) -> int:
    probe = VppProbe(vpps.sockets[node.name], vpps.api_dirs[node.name])
    try:
        return probe.pid()
    finally:
        probe.close()


def run_setup(setup: Setup, counts: Counts, pods_cpu: int, vpp_cpu: int,
              observe: Callable[[list[Node], SetupResult], None] | None = None) -> SetupResult:
    """One setup on a cluster of its own (etcd, fabric, nodes, VPPs), all removed after;
    `observe` sees the nodes once their mesh carries a ping (benchmarks/traffic/encryption)."""
    result = SetupResult(setup.name, {**setup.config, "placement": setup.describe(
        pods_cpu, vpp_cpu)}, load_start=machine.loadavg())
    if lacks_vpp(result, setup.config):
        return result
    with placed({pods_cpu} if setup.pinned else None), \
            setup_cluster(result, setup.config, "vco") as (cluster, vpps):
        nodes = [vpps.add_node() if vpps is not None else cluster.add_node()
                 for _ in range(setup.nodes)]
        if vpps is not None:
            cpu = pods_cpu if setup.vpp == "pods" else vpp_cpu
            result.config["VPP's threads may run on"] = ", ".join(
                move(vpp_pid(vpps, node), {cpu}) for node in nodes)
        a, b = nodes[0].add_pod(), nodes[-1].add_pod()
        wait_for(lambda: converged(nodes), 60, "the node mesh")
        wait_for(lambda: unreachable([a], [b]) == [], 30, "a ping from a to b")
        log(f"{setup.name}: pods {a.ips} on {nodes[0].name}, {b.ips} on {nodes[-1].name}")
        if observe is not None:
            observe(nodes, result)
        where = "same" if setup.nodes == 1 else "across"
        service = DnatService(SERVICE_IP, IPERF_PORT, netns=nodes[0].netns)
        try:
            measure(result, {
                f"tcp-{where}-v4": ("tcp", a, b, 0, False),
                f"tcp-{where}-v6": ("tcp", a, b, 1, False),
                f"tcp-svc-{where}": ("tcp", a, b, 0, True),
                f"rtt-{where}": ("rtt", a, b, 0, False),
                f"udp-{where}": ("udp", a, b, 0, False)}, service, counts)
        finally:
            service.remove()
        before = cpu_times()
        gbps, _ = measure_once("tcp", a, b, 0, None, counts)
        after = cpu_times()
        result.config[BUSY] = busy(before, after)
        cpus = sum(busy_shares(before, after).values())
        if cpus > 0:  # what a busy CPU carries: the run's Gbit/s over the CPUs it kept busy
            result.config[PER_CPU] = round(gbps / cpus, 3)
    return result


# --- the report ----------------------------------------------------------------------------

def table(results: list[SetupResult]) -> list[str]:
    """A column per setup, and beside each VPP or other kernel setup its ratio to the kernel
    setup of its node count (`kernel` for the rows on one node, `kernel-2-nodes` across)."""
    baselines = {BASELINE, f"{BASELINE}-2-nodes"}
    by_name = {r.name: r for r in results}
    head, rule = ["row (mesh on)"], ["---"]
    for r in results:
        head.append(f"`{r.name}`")
        rule.append("---")
        if r.name not in baselines:
            head.append("/ kernel")
            rule.append("---")
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(rule) + " |"]
    for row in ROWS:
        if not any(r.values.get(row.key) or row.key in r.errors for r in results):
            continue
        base = by_name.get(BASELINE if row in ONE_NODE_ROWS else f"{BASELINE}-2-nodes")
        cells = [row.label]
        for r in results:
            cells.append(cell(r, row))
            if r.name not in baselines:
                cells.append(compare(r, base, row))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def command_line(header: dict[str, Any]) -> str:
    """The section's first line: the command, when, the load, the machine, the commit."""
    m = header["machine"]
    return (f"Command: `{header['command']}` (as root, from the checkout). Started "
            f"{header['started']}; load average {header['load_start']} at the start, "
            f"{header['load_end']} at the end. Machine: {m['CPU']}, "
            f"{m['cores (os.cpu_count)']} cores, kernel {m['kernel']}. Code measured: "
            f"{header['commit']}.")


def setup_lines(results: list[SetupResult]) -> list[str]:
    """One line per setup: its keys and what became of it, then its failed rows."""
    lines = []
    for r in results:
        keys = ", ".join(f"{k}: {v}" for k, v in r.config.items())
        what = {"ok": f"measured in {r.seconds:.0f} s, load {r.load_start} -> {r.load_end}",
                "failed": f"**failed**: {r.note}", "skipped": f"skipped: {r.note}"}[r.status]
        lines.append(f"- `{r.name}` ({keys}): {what}")
        lines += [f"  - {k}: **failed**: {e}" for k, e in r.errors.items()]
    return lines


def render(header: dict[str, Any], results: list[SetupResult]) -> str:
    counts: Counts = header["counts"]
    out = [
        BEGIN, "## Pod traffic when VPP has a CPU of its own (issue #25)", "",
        command_line(header), "",
        "The one-machine cluster (node IPs set, the node mesh on), pods through the real "
        "`vswitch-cni`: a -> b on one node; with the `-2-nodes` setups a on the first node and "
        "b on the second. ClusterIP: kube-proxy's DNAT on a's node (testbed/service.py) to b. "
        "Everything the benchmark starts runs on the pods' CPU except where a setup says "
        "otherwise; VPP (a real one in each node's namespace, veth + AF_PACKET pods) is moved "
        "to the CPU its setup names: across nodes both nodes' VPPs share it (a third CPU is "
        "not there). Ratios over `kernel` (on one node) or `kernel-2-nodes` (across), whose "
        "pods have the same one CPU; UDP loss: the difference in points. "
        f"iperf3 one TCP stream {counts.seconds} s, UDP 1400-byte datagrams at 1 Gbit/s "
        f"{counts.seconds} s, RTT the average of {counts.pings} pings 10 ms apart; each row "
        f"{counts.runs} time(s), interleaved; cells: median (min-max).", "",
        *setup_lines(results), "",
        *table(results), "",
        f"{PER_CPU}: that run's Gbit/s over the sum of every CPU's busy share during it (1 = "
        "one CPU busy all the time; other work on the machine counts too).", "",
        plots.embed(PLOT, "TCP Gbit/s per setup, and Gbit/s per busy CPU"), "",
        END, "",
    ]
    return "\n".join(out)


def plot(results: list[SetupResult], directory: Path) -> Path:
    """The section's picture: the TCP rows' medians per setup (on one node, across nodes), and
    Gbit/s per busy CPU."""
    measured = [r for r in results if r.status == "ok"]

    def tcp(title: str, rows: tuple[Row, ...]) -> plots.Bars:
        return plots.Bars(title, "Gbit/s", {
            "ClusterIP" if "svc" in row.key else row.key[-2:].replace("v", "IPv"): {
                r.name: value for r in measured if (value := r.median(row.key)) is not None}
            for row in rows if row.kind == "tcp"})

    per_cpu = {r.name: float(r.config[PER_CPU]) for r in measured if PER_CPU in r.config}
    return plots.bars(directory / f"{PLOT}.svg", "Pod traffic when VPP has a CPU of its own", [
        tcp("TCP on one node, one stream (median)", ONE_NODE_ROWS),
        tcp("TCP across nodes, one stream (median)", ACROSS_ROWS),
        plots.Bars("Gbit/s per busy CPU", "Gbit/s / sum of CPU busy shares",
                   {"TCP IPv4, one more run": per_cpu})])


# --- the command ---------------------------------------------------------------------------

def parse(argv: list[str] | None) -> argparse.Namespace:
    names = [s.name for s in SETUPS]
    parser = argparse.ArgumentParser(prog="python -m benchmarks run vpp-core",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 run of 1 s per row (a smoke run)")
    parser.add_argument("--setup", action="append", choices=names,
                        help="measure only this setup (repeatable; default: all)")
    parser.add_argument("--pods-cpu", type=int, default=0, help="the pods' CPU (default 0)")
    parser.add_argument("--vpp-cpu", type=int, default=1,
                        help="VPP's CPU in the own-core setups (default 1)")
    add_report_options(parser)
    args = parser.parse_args(argv)
    check_report_options(parser, args)
    usable = os.sched_getaffinity(0)
    for flag, cpu in (("--pods-cpu", args.pods_cpu), ("--vpp-cpu", args.vpp_cpu)):
        if cpu not in usable:
            parser.error(f"{flag} {cpu}: not a CPU this process may use ({sorted(usable)})")
    if args.pods_cpu == args.vpp_cpu:
        parser.error("--pods-cpu and --vpp-cpu must differ: VPP's own CPU is what is measured")
    if os.geteuid() != 0:
        parser.error("needs root: it creates network namespaces and starts agents")
    args.setup = [s for s in SETUPS if args.setup is None or s.name in args.setup]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)

    results: list[SetupResult] = []

    def measure_all(counts: Counts) -> list[SetupResult]:
        for setup in args.setup:
            log(f"{setup.name}: starting")
            results.append(run_setup(setup, counts, args.pods_cpu, args.vpp_cpu))
        return results

    rc = report("vpp-core", argv, args, measure_all, render, (BEGIN, END))
    if args.out is not None:
        log(f"wrote {plot(results, plots.plot_dir(args.out))}")
    return rc


if __name__ == "__main__":
    sys.exit(main())

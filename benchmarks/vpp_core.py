"""Pod traffic on a node whose VPP has a CPU of its own (issue #25), beside the kernel dataplane
given the same CPU for its pods: the placement VPP's deployments use, measured on two cores.

    python -m benchmarks.vpp_core [--quick] [--setup NAME ...] [--pods-cpu N] [--vpp-cpu N]
                                  [--out BENCHMARKS.md] [--json FILE]

One node of the one-machine cluster (testbed/cluster.py: its node IP set, so the node mesh is
on, with no other node), pods a and b added through the real `vswitch-cni`, and the rows of
benchmarks/mesh_traffic that stay on one node: TCP a -> b in IPv4 and IPv6, TCP to a stand-in
ClusterIP backed by b (kube-proxy's DNAT on the node, testbed/service.py), RTT, UDP loss at
1 Gbit/s offered. Only one node: across nodes each node's VPP would need a CPU of its own too,
and this machine has two.

Each setup (SETUPS) is the agent config and where the work runs. The benchmark pins itself
to the pods' CPU (`--pods-cpu`, 0) while a setup runs, so everything it starts (etcd, the
agent, iperf3 and ping in the pods) runs there; a setup's VPP is then moved, every thread of
it, to its CPU (`--vpp-cpu`, 1; the pods' CPU for `vpp-shared`). `kernel-any-cpu` pins
nothing: the pods' sender and receiver get a CPU each, as mesh_traffic measures the kernel.
The ratios are over `kernel` (the pods' CPU only): the same CPU for the pods, and VPP's CPU on
top, as a node that gives VPP a core has it. VPP setups need the VSWITCH_TEST_VPP_START /
_STOP / _MESH_SOCKET variables (testbed/vpp_nodes.py) and are skipped with a note without them.

Writes its own section of --out between markers (full mode's default is BENCHMARKS.md; quick
mode writes only where --out says). Traffic goes only to the namespaces it creates; everything
it starts is removed again, also on failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import machine
from benchmarks.harness import REPO, interrupter
from benchmarks.mesh_traffic import SERVICE_IP, log, measure, short
from benchmarks.mesh_traffic_report import FULL, QUICK, ROWS, Counts, SetupResult, cell, compare
from benchmarks.soak_report import write_section
from benchmarks.traffic import IPERF_PORT
from testbed.cluster import Cluster, unreachable, wait_for
from testbed.service import DnatService
from testbed.vpp import VppProbe
from testbed.vpp_nodes import MISSING, REAL_VPP, VppNodes

BEGIN = ("<!-- vpp-core: begin (written by python -m benchmarks.vpp_core; "
         "benchmarks.run keeps it) -->")
END = "<!-- vpp-core: end -->"
DEFAULT_OUT = REPO / "BENCHMARKS.md"
BASELINE = "kernel"
ONE_NODE_ROWS = tuple(r for r in ROWS if "across" not in r.key)


@dataclass(frozen=True)
class Setup:
    name: str
    config: dict[str, Any]  # the agent's keys beside the cluster's own
    pinned: bool  # everything on the pods' CPU (else anywhere)
    vpp: str = ""  # "", "pods" (VPP on the pods' CPU) or "own" (on --vpp-cpu)

    def describe(self, pods_cpu: int, vpp_cpu: int) -> str:
        where = f"pods on CPU {pods_cpu}" if self.pinned else "pods on any CPU"
        if self.vpp:
            where += f", VPP on CPU {pods_cpu if self.vpp == 'pods' else vpp_cpu}"
        return where


VPP_KEYS = {"Dataplane": "vpp", "VXLANOwner": "linux"}
SETUPS = (
    Setup("kernel", {"Dataplane": "kernel"}, pinned=True),
    Setup("kernel-any-cpu", {"Dataplane": "kernel"}, pinned=False),
    Setup("vpp-shared", dict(VPP_KEYS), pinned=True, vpp="pods"),
    Setup("vpp-own-core", dict(VPP_KEYS), pinned=True, vpp="own"),
    Setup("vpp-own-core-polling", {**VPP_KEYS, "InterfaceRxMode": "polling"}, pinned=True,
          vpp="own"),
)


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


def run_setup(setup: Setup, counts: Counts, pods_cpu: int, vpp_cpu: int) -> SetupResult:
    """One setup on a cluster of its own (etcd, fabric, node, VPP), all removed after."""
    result = SetupResult(setup.name, {**setup.config, "placement": setup.describe(
        pods_cpu, vpp_cpu)}, load_start=machine.loadavg())
    if setup.vpp and not REAL_VPP:
        result.status, result.note = "skipped", MISSING
        return result
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix=f"vpp-core-{setup.name}-"))
    try:
        with placed({pods_cpu} if setup.pinned else None), \
                Cluster(workdir, dict(setup.config)) as cluster:
            vpps = VppNodes(cluster, prefix="vco") if setup.vpp else None
            try:
                node = vpps.add_node() if vpps is not None else cluster.add_node()
                if vpps is not None:
                    probe = VppProbe(vpps.sockets[node.name], vpps.api_dirs[node.name])
                    try:
                        cpu = pods_cpu if setup.vpp == "pods" else vpp_cpu
                        result.config["VPP's threads may run on"] = move(probe.pid(), {cpu})
                    finally:
                        probe.close()
                a, b = node.add_pod(), node.add_pod()
                wait_for(lambda: unreachable([a], [b]) == [], 30, "a ping from a to b")
                log(f"{setup.name}: pods {a.ips} {b.ips} on {node.name}")
                service = DnatService(SERVICE_IP, IPERF_PORT, netns=node.netns)
                try:
                    measure(result, {
                        "tcp-same-v4": ("tcp", a, b, 0, False),
                        "tcp-same-v6": ("tcp", a, b, 1, False),
                        "tcp-svc-same": ("tcp", a, b, 0, True),
                        "rtt-same": ("rtt", a, b, 0, False),
                        "udp-same": ("udp", a, b, 0, False)}, service, counts)
                finally:
                    service.remove()
            finally:
                cluster.close()  # the pods deleted and the agent stopped while VPP still runs
                if vpps is not None:
                    vpps.close()
    except (RuntimeError, AssertionError, OSError, subprocess.SubprocessError) as exc:
        result.status, result.note = "failed", short(exc)
        log(f"{setup.name}: failed: {result.note}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result.seconds = time.monotonic() - started
    result.load_end = machine.loadavg()
    return result


# --- the report ----------------------------------------------------------------------------

def table(results: list[SetupResult]) -> list[str]:
    base = next((r for r in results if r.name == BASELINE), None)
    head, rule = ["row (one node, mesh on)"], ["---"]
    for r in results:
        head.append(f"`{r.name}`")
        rule.append("---")
        if r.name != BASELINE:
            head.append(f"/ `{BASELINE}`")
            rule.append("---")
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(rule) + " |"]
    for row in ONE_NODE_ROWS:
        cells = [row.label.replace(", same node", "")]
        for r in results:
            cells.append(cell(r, row))
            if r.name != BASELINE:
                cells.append(compare(r, base, row))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render(header: dict[str, Any], results: list[SetupResult]) -> str:
    counts: Counts = header["counts"]
    m = header["machine"]
    setups = []
    for r in results:
        keys = ", ".join(f"{k}: {v}" for k, v in r.config.items())
        what = {"ok": f"measured in {r.seconds:.0f} s, load {r.load_start} -> {r.load_end}",
                "failed": f"**failed**: {r.note}", "skipped": f"skipped: {r.note}"}[r.status]
        setups.append(f"- `{r.name}` ({keys}): {what}")
        setups += [f"  - {k}: **failed**: {e}" for k, e in r.errors.items()]
    out = [
        BEGIN, "## Pod traffic when VPP has a CPU of its own (issue #25)", "",
        f"Command: `{header['command']}` (as root, from the checkout). Started "
        f"{header['started']}; load average {header['load_start']} at the start, "
        f"{header['load_end']} at the end. Machine: {m['CPU']}, "
        f"{m['cores (os.cpu_count)']} cores, kernel {m['kernel']}. Code measured: "
        f"{header['commit']}.", "",
        "One node of the one-machine cluster (node IP set, the node mesh on, no other node), "
        "pods a -> b through the real `vswitch-cni`; ClusterIP: kube-proxy's DNAT on the node "
        "(testbed/service.py) to b. Everything the benchmark starts runs on the pods' CPU "
        "except where a setup says otherwise; VPP (a real one in the node's namespace, veth + "
        "AF_PACKET pods) is moved to the CPU its setup names. Ratios over `kernel`, whose pods "
        "have the same one CPU; UDP loss: the difference in points. "
        f"iperf3 one TCP stream {counts.seconds} s, UDP 1400-byte datagrams at 1 Gbit/s "
        f"{counts.seconds} s, RTT the average of {counts.pings} pings 10 ms apart; each row "
        f"{counts.runs} time(s), interleaved; cells: median (min-max).", "",
        *setups, "",
        *table(results), "",
        END, "",
    ]
    return "\n".join(out)


# --- the command ---------------------------------------------------------------------------

def parse(argv: list[str] | None) -> argparse.Namespace:
    names = [s.name for s in SETUPS]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vpp_core",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 run of 1 s per row (a smoke run)")
    parser.add_argument("--setup", action="append", choices=names,
                        help="measure only this setup (repeatable; default: all)")
    parser.add_argument("--pods-cpu", type=int, default=0, help="the pods' CPU (default 0)")
    parser.add_argument("--vpp-cpu", type=int, default=1,
                        help="VPP's CPU in the own-core setups (default 1)")
    parser.add_argument("--out", type=Path,
                        help="markdown file whose section is replaced (default: BENCHMARKS.md; "
                        "quick mode: none)")
    parser.add_argument("--json", type=Path, help="also write every value here")
    args = parser.parse_args(argv)
    if args.out is None and not args.quick:
        args.out = DEFAULT_OUT
    if args.quick and args.out is not None and args.out.resolve() == DEFAULT_OUT.resolve():
        parser.error("quick-mode numbers must not replace BENCHMARKS.md; pick another --out")
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
    handler = interrupter(os.getpid())  # SIGTERM/SIGHUP unwind through every cleanup
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)
    counts = QUICK if args.quick else FULL
    command = "python -m benchmarks.vpp_core " + shlex.join(
        sys.argv[1:] if argv is None else argv)
    header: dict[str, Any] = {
        "command": command.strip(), "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_start": machine.loadavg(), "machine": machine.machine(),
        "commit": machine.git_commit(), "counts": counts}
    results = []
    for setup in args.setup:
        log(f"{setup.name}: starting")
        results.append(run_setup(setup, counts, args.pods_cpu, args.vpp_cpu))
    header["load_end"] = machine.loadavg()
    text = render(header, results)
    print(text)
    if args.out is not None:
        write_section(args.out, text, BEGIN, END)
        log(f"wrote the section of {args.out}")
    if args.json is not None:
        data = {**header, "counts": dataclasses.asdict(counts),
                "setups": [r.to_json() for r in results]}
        args.json.write_text(json.dumps(data, indent=1))
    return 0 if all(r.status != "failed" and not r.errors for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

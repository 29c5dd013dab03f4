"""Runs every benchmark of issue #7 and writes the report (BENCHMARKS.md by default).

    python -m benchmarks run cni [--quick] [--out FILE]

Full mode: enough runs for stable medians (takes several minutes). `--quick`: tiny counts, well
under two minutes, the report goes to a temp directory unless --out says otherwise, and never to
the repository's BENCHMARKS.md (CI runs it so the suite cannot rot; no thresholds are asserted).
Figure 1's picture, cni-latency.svg, goes to docs/benchmarks/ beside the report.

Everything it creates (etcd members and data dirs, agents, namespaces, links, temp dirs) is removed
on the way out, also on failure, Ctrl-C or SIGTERM. Needs root (namespaces, links).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agent.dataplane.vpp.afpacket import RingOptions
from benchmarks.cni import full_node, ipam_core, nodeid, plugin_exec, restart, verbs
from benchmarks.cni.report import BEGIN, END, OURS, OURS_VPP, REFERENCE, plot, render
from benchmarks.cni.results import Results
from benchmarks.core import agent_metrics, machine
from benchmarks.core.harness import (
    REPO,
    CniNetwork,
    Namespaces,
    PodSubnets,
    agent_running,
    bench_agent_config,
    interrupt_on_signals,
    ours_network,
    plugin_bin_dir,
    reference_network,
    remove_agent_links,
)
from benchmarks.core.plots import plot_dir
from benchmarks.core.sections import write_section
from testbed.agent import AgentHandle
from testbed.etcd import EtcdCluster, EtcdServer
from testbed.libcni import DEFAULT_BUILD_DIR, build_driver

DEFAULT_OUT = REPO / "BENCHMARKS.md"
VPP_ENV = "VSWITCH_TEST_VPP_SOCKET"


@dataclass(frozen=True)
class Counts:
    latency_runs: int
    warmup: int
    throughput_pods: int
    throughput_runs: int
    exec_runs: int
    restart_pods: int
    restarts: int
    race_agents: int
    race_processes: int
    races: int
    ipam_runs: int
    churn_operations: int
    scale_live: int  # pods up before the "full node" ADDs are measured
    scale_measured: int


FULL = Counts(latency_runs=100, warmup=3, throughput_pods=200, throughput_runs=3, exec_runs=200,
              restart_pods=250, restarts=5, race_agents=500, race_processes=4, races=3,
              ipam_runs=10, churn_operations=100_000, scale_live=100, scale_measured=30)
QUICK = Counts(latency_runs=5, warmup=1, throughput_pods=8, throughput_runs=1, exec_runs=10,
               restart_pods=20, restarts=2, race_agents=20, race_processes=2, races=1,
               ipam_runs=2, churn_operations=10_000, scale_live=4, scale_measured=2)


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _agent_sections(res: Results, counts: Counts, tmp: Path, stack: ExitStack,
                    subnets: PodSubnets) -> None:
    namespaces = Namespaces()
    stack.callback(namespaces.close)
    with EtcdServer() as etcd:
        log("building the libcni driver and the plugin")
        driver = build_driver(DEFAULT_BUILD_DIR)
        bin_dir = plugin_bin_dir(tmp)
        host_ns = namespaces.create()  # the runtimes' namespace for ours and the reference

        config = bench_agent_config(tmp, etcd.endpoints, subnets.take())
        try:
            with agent_running(tmp, config, "latency") as agent:
                ours = ours_network(driver, bin_dir, tmp, host_ns, agent)
                ref = reference_network(driver, tmp, host_ns)
                etcd_proc = etcd.members[0].proc
                assert etcd_proc is not None
                servers = {"agent": agent.process.pid, "etcd": etcd_proc.pid}
                _latency_and_throughput(res, counts, agent, ours, ref, namespaces, servers)
                log(f"full node: ADD/DEL with {counts.scale_live}+ live pods, kernel dataplane")
                res.scale["kernel"] = full_node.run(ours, namespaces, counts.scale_live,
                                                    counts.scale_measured)
        finally:
            remove_agent_links(config)

        socket = os.environ.get(VPP_ENV, "")
        if socket and os.path.exists(socket):
            log(f"VPP at {socket}: sequential latency with Dataplane: vpp")
            vpp_config = bench_agent_config(tmp, etcd.endpoints, subnets.take(), {
                "Dataplane": "vpp", "VPPAPISocket": socket, "UseTAPInterfaces": False})
            try:
                with agent_running(tmp, vpp_config, "vpp") as agent:
                    vpp = ours_network(driver, bin_dir, tmp, host_ns, agent, "vswitch-cni-vpp")
                    samples = verbs.sequential([vpp], namespaces, counts.latency_runs,
                                               counts.warmup)["vswitch-cni-vpp"]
                    res.samples[OURS_VPP] = samples
                    res.vpp = verbs.summarize({OURS_VPP: samples})[OURS_VPP]
                    log(f"full node: ADD/DEL with {counts.scale_live}+ live pods, VPP")
                    before = agent_metrics.snapshot(agent)
                    res.scale["vpp"] = full_node.run(vpp, namespaces, counts.scale_live,
                                                     counts.scale_measured, socket)
                    after = agent_metrics.snapshot(agent)
                    res.scale_vpp = {
                        "phases": agent_metrics.delta(before, after, agent_metrics.PHASES),
                        "calls": agent_metrics.delta(before, after, agent_metrics.VPP_CALLS)}
                    res.vpp_ring_mib = RingOptions().kernel_bytes / 2**20
            finally:
                remove_agent_links(vpp_config)
        else:
            res.vpp_note = (f"not measured: no VPP reachable ({VPP_ENV} "
                            f"{'names a missing socket' if socket else 'is not set'})")

        log(f"restart / reconcile / RSS with {counts.restart_pods} pods")
        restart_config = bench_agent_config(tmp, etcd.endpoints, subnets.take())

        def network(agent: AgentHandle) -> CniNetwork:
            return ours_network(driver, bin_dir, tmp, host_ns, agent, "vswitch-cni-restart")

        res.restart = restart.run(tmp, restart_config, network, namespaces,
                                  counts.restart_pods, counts.restarts)


def _latency_and_throughput(res: Results, counts: Counts, agent: AgentHandle, ours: CniNetwork,
                            ref: CniNetwork, namespaces: Namespaces,
                            servers: dict[str, int]) -> None:
    log(f"sequential ADD/CHECK/DEL: {counts.latency_runs} runs each, ours and reference")
    before = agent_metrics.snapshot(agent)
    samples = verbs.sequential([ours, ref], namespaces, counts.latency_runs, counts.warmup)
    res.samples.update(samples)
    res.latency = verbs.summarize(samples)
    res.latency_runs = counts.latency_runs
    res.seq_agent = _agent_delta(before, agent_metrics.snapshot(agent))
    log(f"throughput: {counts.throughput_runs} x {counts.throughput_pods} pods, 16 runtimes")
    res.throughput = {OURS: [], REFERENCE: []}
    before = agent_metrics.snapshot(agent)
    for i in range(counts.throughput_runs):
        for net in (ours, ref) if i % 2 == 0 else (ref, ours):
            res.throughput[net.label].append(
                verbs.throughput(net, namespaces, counts.throughput_pods,
                                     servers if net is ours else {}))
    res.tp_agent = _agent_delta(before, agent_metrics.snapshot(agent))


def _agent_delta(before: agent_metrics.Series,
                 after: agent_metrics.Series) -> dict[str, dict[str, agent_metrics.Histogram]]:
    return {"phases": agent_metrics.delta(before, after, agent_metrics.PHASES),
            "requests": agent_metrics.delta(before, after, agent_metrics.REQUESTS)}


def run(counts: Counts, mode: str, command: str) -> Results:
    started = time.monotonic()
    res = Results(mode=mode, command=command,
                  started=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                  load_start=machine.loadavg(), machine=machine.machine(),
                  versions=machine.versions())
    subnets = PodSubnets()
    tmp = Path(tempfile.mkdtemp(prefix=f"vcni-bench-{os.getpid()}-"))
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        _agent_sections(res, counts, tmp, stack, subnets)
    log(f"plugin exec: {counts.exec_runs} runs")
    res.plugin_exec = plugin_exec.run(counts.exec_runs)
    log(f"node-ID race: {counts.races} x {counts.race_agents} agents on a 3-member etcd")
    with EtcdCluster(3) as cluster:
        res.nodeid = [nodeid.race(cluster.endpoints, f"/vswitch-bench-nodeid-{os.getpid()}-{i}/",
                                  counts.race_agents, counts.race_processes)
                      for i in range(counts.races)]
    log("IPAM core")
    res.ipam = ipam_core.run(counts.ipam_runs, counts.churn_operations)
    res.load_end = machine.loadavg()
    res.wall_s = time.monotonic() - started
    return res


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks run cni",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny counts (CI): < 2 minutes")
    parser.add_argument("--out", type=Path, help="report path (default: BENCHMARKS.md; "
                        "with --quick one in a temp directory)")
    args = parser.parse_args(argv)
    raw_args = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m benchmarks run cni", *raw_args])
    out: Path = args.out
    if out is None:
        # quick: a directory of its own, for the report and its pictures (docs/benchmarks/)
        out = (Path(tempfile.mkdtemp(prefix="benchmarks-quick-")) / "BENCHMARKS.md"
               if args.quick else DEFAULT_OUT)
    if args.quick and out.resolve() == DEFAULT_OUT.resolve():
        parser.error("quick-mode numbers must not replace BENCHMARKS.md; pick another --out")
    if os.geteuid() != 0:
        parser.error("needs root: it creates network namespaces and links")
    interrupt_on_signals()
    results = run(QUICK if args.quick else FULL, "quick" if args.quick else "full", command)
    log(f"wrote {plot(results, plot_dir(out))}")
    write_section(out, render(results), BEGIN, END)
    log(f"wrote {out} ({results.wall_s:.0f} s)")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

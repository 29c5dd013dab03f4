"""Renders BENCHMARKS.md from the measured results: the machine, the versions, the command, one
section per figure (n / min / median / p99 tables), the targets of issue #7 with met or missed and
by how much, and where the time goes (the agent's own phase histograms, start-up and memory
splits)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.agent_metrics import Histogram
from benchmarks.cni_bench import VERBS, Throughput
from benchmarks.ipam_core import IpamFigures
from benchmarks.mesh_scale import render as render_mesh
from benchmarks.nodeid import Race
from benchmarks.plugin_exec import FLOOR as PLUGIN_FLOOR
from benchmarks.restart import RestartFigures
from benchmarks.scale_add import AtScale
from benchmarks.stats import Summary, ratio
from benchmarks.traffic import Counts as TrafficCounts
from benchmarks.traffic import Figures
from benchmarks.traffic import render as render_traffic

MB = 1024 * 1024
OURS = "vswitch-cni"
REFERENCE = "bridge+host-local"
ADD_PHASES = ("allocate", "record", "wire", "podside", "commit")


@dataclass
class Results:
    mode: str
    command: str
    started: str
    load_start: str
    machine: dict[str, str]
    versions: dict[str, str]
    latency_runs: int = 0
    latency: dict[str, dict[str, Summary]] = field(default_factory=dict)
    vpp: dict[str, Summary] | None = None
    vpp_note: str = ""
    seq_agent: dict[str, dict[str, Histogram]] = field(default_factory=dict)
    throughput: dict[str, list[Throughput]] = field(default_factory=dict)
    tp_agent: dict[str, dict[str, Histogram]] = field(default_factory=dict)
    plugin_exec: dict[str, Summary] = field(default_factory=dict)
    restart: RestartFigures | None = None
    nodeid: list[Race] = field(default_factory=list)
    ipam: IpamFigures | None = None
    mesh: dict[str, Any] | None = None
    traffic: list[Figures] = field(default_factory=list)
    traffic_counts: TrafficCounts | None = None
    scale: dict[str, AtScale] = field(default_factory=dict)  # "kernel" / "vpp"
    # the VPP agent's ADD phases and VPP requests over the whole full-node run (fill and DELs)
    scale_vpp: dict[str, dict[str, Histogram]] = field(default_factory=dict)
    vpp_ring_mib: float | None = None  # the default AF_PACKET rings of one pod interface
    load_end: str = ""
    wall_s: float = 0.0


def _n(value: float, digits: int = 1) -> str:
    return f"{value:.{digits}f}" if math.isfinite(value) else "inf"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


def _stat_row(label: str, s: Summary, digits: int = 1) -> list[str]:
    return [label, str(s.n), _n(s.min, digits), _n(s.median, digits), _n(s.p99, digits), s.unit]


STAT_HEADER = ("figure", "n", "min", "median", "p99", "unit")


@dataclass(frozen=True)
class Target:
    name: str
    measured: float
    goal: float
    unit: str
    at_least: bool = False  # True: measured must be >= goal
    where: str = ""

    @property
    def met(self) -> bool:
        return self.measured >= self.goal if self.at_least else self.measured <= self.goal

    def verdict(self) -> str:
        if self.goal == 0 or not math.isfinite(self.measured):
            return "n/a"
        off = (self.measured - self.goal) / self.goal * 100
        if self.met:
            return f"met ({abs(off):.0f}% {'above' if self.at_least else 'under'} the target)"
        word = "short of" if self.at_least else "over"
        return (f"**missed**: {_n(abs(self.measured - self.goal), 2)} {self.unit} "
                f"({abs(off):.0f}%) {word} the target{'; ' + self.where if self.where else ''}")


def _throughput_median(runs: Sequence[Throughput]) -> float:
    return Summary.of([t.add_pods_per_s for t in runs], "pods/s").median


def _cpu_per_add(runs: Sequence[Throughput]) -> float:
    """Total CPU ms per ADD under concurrency: each consumer's median over runs, summed."""
    names = {name for t in runs for name in t.add_cpu_ms}
    return sum(_median([t.add_cpu_ms.get(name, 0.0) for t in runs]) for name in names)


def targets(r: Results) -> list[Target]:
    """Issue #13's table (with #7's ADD p99 and agent RSS, and #18's traffic targets)."""
    out: list[Target] = []
    ours, ref = r.latency.get(OURS), r.latency.get(REFERENCE)
    if ours and ref:
        out.append(Target("ADD median / reference ADD median (sequential)",
                          ratio(ours["ADD"].median, ref["ADD"].median), 1.5, "x",
                          where="see *Where an ADD's time goes*"))
        out.append(Target("ADD p99 (sequential)", ours["ADD"].p99, 100.0, "ms",
                          where="see *Where an ADD's time goes*"))
        out.append(Target("DEL median / reference DEL median (sequential)",
                          ratio(ours["DEL"].median, ref["DEL"].median), 1.0, "x",
                          where="see *Where an ADD's time goes* (agent DEL time)"))
    tp_ours, tp_ref = r.throughput.get(OURS), r.throughput.get(REFERENCE)
    if tp_ours and tp_ref:
        out.append(Target("pods/s, 16 concurrent ADDs / reference pods/s",
                          ratio(_throughput_median(tp_ours), _throughput_median(tp_ref)), 0.8,
                          "x", at_least=True, where="see the CPU split in figure 2"))
    out += _exec_targets(r)
    if tp_ours:
        out.append(Target("total CPU per pod ADD (agent + etcd + runtime side)",
                          _cpu_per_add(tp_ours), 25.0, "ms", where="see the CPU split in figure 2"))
    if r.restart is not None:
        pods = r.restart.pods
        out.append(Target(f"reconcile of {pods} pods (agent's report, median)",
                          Summary.of(r.restart.reconcile_loaded_s, "s").median, 0.5, "s",
                          where="see figure 4's split"))
        out.append(Target(f"agent RSS with {pods} pods (larger median: after ADDs / restart)",
                          max(Summary.of(r.restart.rss_after_adds, "B").median,
                              Summary.of(r.restart.rss_loaded, "B").median) / MB, 80.0, "MB",
                          where="see figure 7's split"))
    kernel, vpp = r.scale.get("kernel"), r.scale.get("vpp")
    if kernel and vpp:  # only with a real VPP, like the traffic targets
        out.append(Target(f"VPP ADD ({vpp.live}+ live pods) / kernel ADD (the same), "
                          "the agent's defaults", ratio(vpp.add.median, kernel.add.median),
                          1.3, "x", where="see figure 8; with `ExpediteKernelRcu`: \"VPP ADD "
                          "and the kernel's RCU grace periods\""))
    if vpp and vpp.ring_mib_per_interface is not None:
        out.append(Target("VPP kernel memory per pod interface (AF_PACKET rings VPP maps)",
                          vpp.ring_mib_per_interface, 2.0, "MiB", where="see figure 8"))
    return out + traffic_targets(r.traffic)


def _exec_targets(r: Results) -> list[Target]:
    if not r.plugin_exec:
        return []
    first = next(iter(r.plugin_exec.values()))
    floor = r.plugin_exec.get(PLUGIN_FLOOR)
    if floor is None:
        return []
    return [Target("plugin exec median (installed) over the interpreter floor "
                   "(`python3 -I -S -c pass`)", first.median - floor.median, 5.0, "ms",
                   where=f"the plugin {_n(first.median, 1)} ms, the floor "
                         f"{_n(floor.median, 1)} ms; see figure 3's split")]


def traffic_targets(figs: Sequence[Figures]) -> list[Target]:
    """Issue #18's targets, for the VPP setup with the default AF_PACKET options."""
    kernel = next((f for f in figs if f.label.startswith("kernel")), None)
    vpp = next((f for f in figs if f.label.startswith("VPP") and not f.note
                and not f.failure), None)
    if kernel is None or vpp is None:
        return []
    where = f"{vpp.label}; see the traffic section"
    out = [Target("VPP pod-to-pod TCP, one stream", vpp.median("tcp_gbps") or 0.0, 2.0,
                  "Gbit/s", at_least=True, where=where),
           Target("VPP pod-to-pod RTT", vpp.median("rtt_ms") or math.inf, 0.3, "ms",
                  where=where)]
    kernel_loss = kernel.median("udp_loss_pct")
    if kernel_loss is not None:
        out.append(Target("VPP UDP loss at 1 Gbit/s, points over the kernel dataplane's + 1",
                          (vpp.median("udp_loss_pct") or 0.0) - kernel_loss, 1.0, "points",
                          where=where))
    return out


def _phase_table(hists: dict[str, Histogram], verb_hist: Histogram | None) -> list[str]:
    total = sum(hists[p].sum for p in ADD_PHASES if p in hists)
    rows = []
    for phase in ADD_PHASES:
        h = hists.get(phase)
        if h is None or not h.count:
            continue
        share = h.sum / total * 100 if total else 0.0
        rows.append([phase, str(int(h.count)), _n(h.mean * 1000, 2), f"{share:.0f}%",
                     f"≤ {_n(h.quantile_bound(0.5) * 1000, 1)}",
                     f"≤ {_n(h.quantile_bound(0.99) * 1000, 1)}"])
    if verb_hist is not None and verb_hist.count:
        rows.append(["whole ADD in the agent (gRPC handler)", str(int(verb_hist.count)),
                     _n(verb_hist.mean * 1000, 2), "",
                     f"≤ {_n(verb_hist.quantile_bound(0.5) * 1000, 1)}",
                     f"≤ {_n(verb_hist.quantile_bound(0.99) * 1000, 1)}"])
    return _table(("phase", "count", "mean ms", "share of phases", "p50 bucket ms",
                   "p99 bucket ms"), rows)


def render(r: Results) -> str:
    out = ["# Benchmarks", ""]
    out += [f"Generated by `{r.command}` ({r.mode} mode) on {r.started}; the whole suite took "
            f"{r.wall_s:.0f} s. Load average (1/5/15 min) at start: {r.load_start}; at the end: "
            f"{r.load_end}. Every figure is min / median / p99 (nearest rank) over n runs; with "
            "fewer than 100 runs p99 is the slowest run. Nothing here is hard-coded: rerun the "
            "command to regenerate this file.", ""]
    out += ["## Machine", "", *_table(("", ""), list(r.machine.items()))]
    out += ["## Versions", "", *_table(("component", "version"), list(r.versions.items()))]
    out += _targets_section(r)
    out += _latency_section(r)
    out += _throughput_section(r)
    out += _exec_section(r)
    out += _restart_section(r)
    out += _nodeid_section(r)
    out += _ipam_section(r)
    out += _memory_section(r)
    out += _scale_section(r)
    if r.mesh is not None:
        out += ["## Node mesh at scale (issue #11)", "", render_mesh(r.mesh), "",
                "Measured by `benchmarks/mesh_scale.py` (also alone: `python3 -m "
                "benchmarks.mesh_scale --nodes N`): the synthetic nodes' addresses are in a range "
                "nothing answers; the kernel programs their FDB entries, neighbors and routes all "
                "the same.", ""]
    if r.traffic and r.traffic_counts is not None:
        out += render_traffic(r.traffic, r.traffic_counts)
    return "\n".join(out).rstrip() + "\n"


def _targets_section(r: Results) -> list[str]:
    rows = [[t.name, f"{_n(t.measured, 2)} {t.unit}",
             f"{'≥' if t.at_least else '≤'} {_n(t.goal, 1)} {t.unit}", t.verdict()]
            for t in targets(r)]
    return ["## Targets (issue #13, with #7's and #18's)", "",
            *_table(("target", "measured", "goal", "verdict"), rows)]


def _latency_section(r: Results) -> list[str]:
    out = ["## 1. CNI ADD / CHECK / DEL latency through libcni (sequential)", "",
           "libcni 1.3.0 driver exec to exit, one pod at a time, a fresh pod namespace per run; "
           f"{OURS}: kernel dataplane, real agent, real etcd; {REFERENCE}: reference plugins "
           "1.9.1. Both run the driver in the same kind of 'host' namespace through nsenter. "
           f"n = {r.latency_runs} runs per verb, after warm-up runs that are not counted.", ""]
    rows = [_stat_row(f"{verb} {label}", s)
            for verb in VERBS for label, by_verb in r.latency.items()
            for s in (by_verb[verb],)]
    out += _table(STAT_HEADER, rows)
    ours, ref = r.latency.get(OURS), r.latency.get(REFERENCE)
    if ours and ref:
        out += ["Ratios ours / reference:", ""]
        out += _table(("verb", "ratio of medians", "ratio of p99s"), [
            [verb, _n(ratio(ours[verb].median, ref[verb].median), 2),
             _n(ratio(ours[verb].p99, ref[verb].p99), 2)] for verb in VERBS])
    out += ["### VPP dataplane", ""]
    if r.vpp and ref:
        out += _table(STAT_HEADER, [_stat_row(f"{v} vswitch-cni (vpp)", r.vpp[v]) for v in VERBS])
        out += _table(("verb", "ratio of medians to the reference"),
                      [[v, _n(ratio(r.vpp[v].median, ref[v].median), 2)] for v in VERBS])
    else:
        out += [r.vpp_note or "not measured: no VPP reachable", ""]
    out += ["### Where an ADD's time goes", "",
            "The agent's own histograms (GET /metrics, `vswitch_cni_add_phase_seconds` and "
            "`vswitch_cni_request_seconds`), differenced over the sequential runs above (the "
            "warm-up included). Means are exact (sum / count); quantiles only to bucket bounds. "
            "What the runtime waits for beyond the agent's handler is the driver's and the "
            "plugin's exec (figure 3) and the gRPC round trip.", ""]
    phases = r.seq_agent.get("phases", {})
    requests = r.seq_agent.get("requests", {})
    out += _phase_table(phases, requests.get("ADD"))
    if ours and requests:
        rows = []
        for verb in VERBS:
            h = requests.get(verb)
            if h is None or not h.count:
                continue
            wall = ours[verb].mean
            rows.append([verb, _n(wall, 1), _n(h.mean * 1000, 1), _n(wall - h.mean * 1000, 1),
                         _n(ref[verb].mean, 1) if ref else "n/a"])
        out += _table(("verb", "libcni wall mean ms", "agent handler mean ms",
                       "outside the agent (execs, gRPC) ms", "reference wall mean ms"), rows)
        if r.plugin_exec:
            exec_median = next(iter(r.plugin_exec.values())).median
            out += [f"Of the time outside the agent, the plugin's own exec is about "
                    f"{_n(exec_median, 1)} ms (figure 3, median); the rest is the driver, "
                    "nsenter and the gRPC round trip.", ""]
    return out


def _throughput_section(r: Results) -> list[str]:
    out = ["## 2. Throughput: 16 concurrent runtimes", "",
           "N pods added by 16 threads, each exec'ing the libcni driver; pods/s = N / wall time "
           "from the first exec to the last exit; then the same threads DEL them all. One value "
           "per run.", ""]
    rows = []
    for label, runs in r.throughput.items():
        if not runs:
            continue
        pods = runs[0].pods
        rows.append(_stat_row(f"ADD {label} (N = {pods})",
                              Summary.of([t.add_pods_per_s for t in runs], "pods/s")))
        rows.append(_stat_row(f"DEL {label} (N = {pods})",
                              Summary.of([t.del_pods_per_s for t in runs], "pods/s")))
        rows.append(_stat_row(f"one ADD under load, {label}",
                              Summary.of([x for t in runs for x in t.add_latency], "ms")))
        rows.append(_stat_row(f"one DEL under load, {label}",
                              Summary.of([x for t in runs for x in t.del_latency], "ms")))
    out += _table(STAT_HEADER, rows)
    ours, ref = r.throughput.get(OURS), r.throughput.get(REFERENCE)
    if ours and ref:
        add = ratio(_throughput_median(ours), _throughput_median(ref))
        delete = ratio(_median([t.del_pods_per_s for t in ours]),
                       _median([t.del_pods_per_s for t in ref]))
        out += [f"Ratio of median pods/s, ours / reference: ADD {_n(add, 2)}, "
                f"DEL {_n(delete, 2)}.", ""]
    out += _cpu_table(r)
    out += ["ADD phases in the agent during the concurrent runs (ours):", ""]
    out += _phase_table(r.tp_agent.get("phases", {}), r.tp_agent.get("requests", {}).get("ADD"))
    return out


def _median(values: Sequence[float]) -> float:
    return Summary.of(values, "").median


def _cpu_table(r: Results) -> list[str]:
    """CPU per pod by consumer: on 2 cores, 2000 ms of CPU per second caps pods/s."""
    rows = []
    for label, runs in r.throughput.items():
        for verb in ("ADD", "DEL"):
            per = [t.add_cpu_ms if verb == "ADD" else t.del_cpu_ms for t in runs]
            if not per:
                continue
            consumers = sorted({name for p in per for name in p})
            total = 0.0
            for name in consumers:
                value = _median([p.get(name, 0.0) for p in per])
                total += value
                rows.append([f"{verb} {label}", name, _n(value, 1)])
            cores = os.cpu_count() or 1
            rows.append([f"{verb} {label}", f"**total** (caps {verb} at "
                         f"{_n(cores * 1000 / total, 0) if total else 'inf'} pods/s on "
                         f"{cores} cores)", _n(total, 1)])
    if not rows:
        return []
    return ["Where the CPU goes under concurrency: CPU ms per pod (median over runs), from "
            "getrusage of every exec'd process (nsenter, libcni driver, plugins) and "
            "/proc/PID/stat of the agent and etcd. With every core busy, pods/s cannot exceed "
            "cores x 1000 / total.", "",
            *_table(("verb, plugin", "consumer", "CPU ms per pod"), rows)]


def _exec_section(r: Results) -> list[str]:
    out = ["## 3. Plugin executable cost", "",
           "Exec to exit of one ADD against a gRPC server that answers at once (no agent work): "
           "the plugin's own cost. The first row is the plugin as the DaemonSet installs it "
           "(agent.install_cni's launcher script and code zip, its interpreter pinned by the "
           "shebang `#!/usr/bin/python3 -IS`); the other rows split that time.", ""]
    out += _table(STAT_HEADER, [_stat_row(label, s) for label, s in r.plugin_exec.items()])
    return out


def _restart_section(r: Results) -> list[str]:
    f = r.restart
    if f is None:
        return []
    out = [f"## 4. Reconcile after an agent restart ({f.pods} live pods)", "",
           f"The same node's agent restarted (SIGTERM, start) with {f.pods} pods in real "
           "namespaces; `reconcile` is the agent's own report (GET /v1/reconcile `seconds`), "
           "`exec to ready` the wall time from exec to the first /readiness 200 (polled every "
           "5 ms). With 0 pods the same restart shows the fixed start-up cost.", ""]
    rows = [
        _stat_row(f"reconcile, {f.pods} pods", Summary.of(f.reconcile_loaded_s, "s"), 3),
        _stat_row(f"exec to ready, {f.pods} pods", Summary.of(f.startup_loaded_s, "s"), 3),
        _stat_row("reconcile, 0 pods", Summary.of(f.reconcile_empty_s, "s"), 3),
        _stat_row("exec to ready, 0 pods", Summary.of(f.startup_empty_s, "s"), 3),
    ]
    out += _table(STAT_HEADER, rows)
    per_pod = Summary.of(f.reconcile_loaded_s, "s").median / f.pods * 1000 if f.pods else 0.0
    out += [f"Reconcile per live pod: {_n(per_pod, 2)} ms (median reconcile / pods); it reads "
            "every record from etcd, checks each pod's host side and pod namespace (netlink "
            "inside the namespace), and lists the dataplane's tagged objects.", ""]
    if f.netns_open_ms:
        s = Summary.of(f.netns_open_ms, "ms")
        out += ["For scale, measured here from Python on the same pods: opening a pyroute2 "
                "`IPRoute(netns=...)` into one pod namespace, listing its links and closing it "
                f"(what one per-pod check needs at least) takes median {_n(s.median, 2)} ms "
                f"(min {_n(s.min, 2)}, p99 {_n(s.p99, 2)}, n = {s.n}); for {f.pods} pods that "
                f"is {_n(s.median * f.pods / 1000, 2)} s if done one pod after another.", ""]
    if f.profile:
        out += [f"Profile: one more restart under cProfile (its reconcile took "
                f"{_n(f.profiled_reconcile_s, 2)} s with the profiler's overhead). The heaviest "
                "functions below `reconcile()` by cumulative time (agent, pyroute2 and etcd "
                "client code; nested calls are counted in each of their callers):", ""]
        out += _table(("function", "calls", "cumulative s", "ms per call"),
                      [[name, str(calls), _n(cum, 3), _n(cum / calls * 1000, 2) if calls else ""]
                       for name, calls, cum in f.profile])
    return out


def _nodeid_section(r: Results) -> list[str]:
    if not r.nodeid:
        return []
    agents = r.nodeid[0].agents
    out = [f"## 5. Node-ID allocation: {agents} agents racing on a 3-member etcd", "",
           "Each simulated agent is a thread with its own etcd client calling "
           "`Store.claim_node_id` (smallest free ID, create-if-absent transaction) under a "
           "unique node name, spread over worker processes; all start at one signal. Settle = "
           "signal to the last claim returning. One race per run, a fresh key prefix each.", ""]
    rows = [_stat_row("time to settle", Summary.of([x.settle_s for x in r.nodeid], "s"), 3),
            _stat_row("one agent's claim (all runs)",
                      Summary.of([c for x in r.nodeid for c in x.claim_s], "s"), 3),
            _stat_row("transactions per agent (1 = no lost race)",
                      Summary.of([x.attempts / x.agents for x in r.nodeid], "txn"), 1)]
    out += _table(STAT_HEADER, rows)
    checks = [f"run {i + 1}: {'all unique' if x.unique else 'DUPLICATES'}, "
              f"{'IDs 1..' + str(x.agents) + ' without gaps' if x.dense else 'gaps in the IDs'}"
              f", {len(x.errors)} errors{': ' + x.errors[0] if x.errors else ''}"
              for i, x in enumerate(r.nodeid)]
    return [*out, "Checked from etcd afterwards: " + "; ".join(checks) + ".", ""]


def _ipam_section(r: Results) -> list[str]:
    f = r.ipam
    if f is None:
        return []
    out = ["## 6. IPAM core (ipam.PodAllocator, pure) on a /16 node subnet", "",
           f"In process, no I/O. `fill`: allocate all {f.capacity} usable addresses of an empty "
           "/16. `churn`: the /16 kept 90% full, release a random address then allocate one. "
           "Memory by tracemalloc with the /16 full (measured apart from the timed runs).", ""]
    rows = [_stat_row("fill /16", Summary.of(f.fill_per_s, "allocations/s"), 0),
            _stat_row("churn at 90% full", Summary.of(f.churn_per_s, "operations/s"), 0)]
    out += _table(STAT_HEADER, rows)
    out += _table(("memory, /16 full", "value"), [
        ["retained by the allocator", f"{_n(f.retained_bytes / MB, 2)} MB"],
        ["peak while filling", f"{_n(f.peak_bytes / MB, 2)} MB"],
        ["per address in use", f"{_n(f.retained_bytes / f.capacity, 1)} bytes"],
    ])
    return out


def _memory_section(r: Results) -> list[str]:
    f = r.restart
    if f is None:
        return []
    out = ["## 7. Agent memory (VmRSS)", "",
           "VmRSS from /proc/PID/status of the agent process: just after it became ready with "
           f"0 pods (one value per start), right after {f.pods} ADDs in the same process, and "
           f"after each restart with {f.pods} live pods. For the floor: a bare interpreter that "
           "only imports the agent's modules.", ""]
    rows = [_stat_row("agent, 0 pods", Summary.of([x / MB for x in f.rss_empty], "MB")),
            _stat_row(f"agent, after {f.pods} ADDs",
                      Summary.of([x / MB for x in f.rss_after_adds], "MB")),
            _stat_row(f"agent restarted with {f.pods} pods",
                      Summary.of([x / MB for x in f.rss_loaded], "MB")),
            _stat_row("python importing the agent's modules only",
                      Summary.of([f.import_rss / MB], "MB"))]
    out += _table(STAT_HEADER, rows)
    if f.pods:
        grow = (Summary.of(f.rss_after_adds, "B").median - Summary.of(f.rss_empty, "B").median)
        out += [f"Growth per pod after ADDs: {_n(grow / f.pods / 1024, 1)} KiB "
                "(median after ADDs minus median at 0 pods, over the pods).", ""]
    return out


def _scale_section(r: Results) -> list[str]:
    if not r.scale:
        return []
    live = next(iter(r.scale.values())).live
    out = [f"## 8. A full node: ADD and DEL with {live}+ live pods", "",
           f"Pods added one at a time through libcni and left in place; the ADDs made with at "
           f"least {live} pods up are the figure, then the DELs made with at least {live} still "
           "up. Memory: the drop of MemAvailable over the whole fill, per pod (the pod's veth, "
           "routes and, with VPP, its AF_PACKET rings and VPP's own growth; other processes on "
           "the machine add noise).", ""]
    rows = []
    for name, s in r.scale.items():
        rows.append(_stat_row(f"ADD, {name} dataplane, {s.live}+ live pods", s.add))
        rows.append(_stat_row(f"DEL, {name} dataplane, {s.live}+ live pods", s.delete))
    out += _table(STAT_HEADER, rows)
    out += _table(("dataplane", "MemAvailable drop per pod"),
                  [[name, f"{_n(s.memory_mib_per_pod, 2)} MiB"] for name, s in r.scale.items()])
    out += _vpp_split(r)
    vpp = r.scale.get("vpp")
    if vpp is not None and vpp.ring_mib_per_interface is not None:
        out += [f"With the node full, VPP had {vpp.interfaces} AF_PACKET rings mapped (the "
                "pods' and the interconnect's), "
                f"{_n(vpp.ring_mib_per_interface, 2)} MiB each on average: the Size of VPP's "
                "shared socket mappings in /proc/PID/smaps, which is the ring memory the kernel "
                "allocated (resident: VPP maps it whole)."
                + (f" The configured defaults give {_n(r.vpp_ring_mib, 2)} MiB (receive + "
                   "transmit frames x frame size; `AfPacketRxFrames`, `AfPacketTxFrames`, "
                   "`AfPacketFrameSize`)." if r.vpp_ring_mib is not None else ""), ""]
    if vpp is not None:
        out += ["The VPP agent here has the defaults (the kernel's RCU grace periods as the "
                "machine has them, `VppPodPool` as they make it). The pod pool and "
                "`ExpediteKernelRcu` are measured side by side in \"VPP ADD and the kernel's RCU "
                "grace periods\" (`python3 -m benchmarks.rcu_add`).", ""]
    return out


def _vpp_split(r: Results) -> list[str]:
    """Where the VPP agent's ADD time went over the full-node run: its phases, and VPP's own
    answer times per request (the agent's vswitch_cni_vpp_call_seconds)."""
    phases, calls = r.scale_vpp.get("phases", {}), r.scale_vpp.get("calls", {})
    if not phases or not calls:
        return []
    out = ["Where the VPP agent's ADD time went over this whole run (every ADD of the fill, "
           "not only the measured ones; the agent's histograms):", ""]
    out += _phase_table(phases, None)
    rows = sorted(((name, h) for name, h in calls.items() if h.count),
                  key=lambda item: -item[1].sum)
    out += ["VPP's answer time per binary-API request over the same run (fill and DELs), by "
            "total time:", ""]
    out += _table(("request", "count", "mean ms", "total s"),
                  [[name, _n(h.count, 0), _n(h.mean * 1000, 2), _n(h.sum, 2)]
                   for name, h in rows[:8]])
    return out


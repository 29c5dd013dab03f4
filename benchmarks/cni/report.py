"""Renders BENCHMARKS.md from the measured results: the machine, the versions, the command, one
section per figure (n / min / median / p99 tables), the targets of issue #7 with met or missed and
by how much, and where the time goes (the agent's own phase histograms, start-up and memory
splits)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from benchmarks.cni.plugin_exec import FLOOR as PLUGIN_FLOOR
from benchmarks.cni.report_node import (
    ipam_section,
    memory_section,
    nodeid_section,
    restart_section,
    scale_section,
)
from benchmarks.cni.results import MB, Results, phase_table
from benchmarks.cni.verbs import VERBS, Throughput
from benchmarks.core import plots
from benchmarks.core.markdown import STAT_HEADER, fmt, md_table, stat_row
from benchmarks.core.sections import markers
from benchmarks.core.stats import Summary, ratio
from benchmarks.core.targets import Target, table

BEGIN, END = markers("cni")
OURS = "vswitch-cni"
OURS_VPP = "vswitch-cni (vpp)"
REFERENCE = "bridge+host-local"
PLOT = "cni-latency"


def plot(r: Results, directory: Path) -> Path:
    """Figure 1's picture: the distributions of ADD, CHECK and DEL, ours (kernel, and VPP when
    measured) beside the reference plugins."""
    labels = [label for label in (OURS, OURS_VPP, REFERENCE) if label in r.samples]
    labels += [label for label in r.samples if label not in labels]
    return plots.cdf(directory / f"{PLOT}.svg",
                     "CNI latency through libcni, sequential "
                     f"({OURS}: kernel dataplane; n = {r.latency_runs} per verb)",
                     {verb: {label: r.samples[label].get(verb, []) for label in labels}
                      for verb in VERBS}, "ms, driver exec to exit")


def _throughput_median(runs: Sequence[Throughput]) -> float:
    return Summary.of([t.add_pods_per_s for t in runs], "pods/s").median


def _cpu_per_add(runs: Sequence[Throughput]) -> float:
    """Total CPU ms per ADD under concurrency: each consumer's median over runs, summed."""
    names = {name for t in runs for name in t.add_cpu_ms}
    return sum(_median([t.add_cpu_ms.get(name, 0.0) for t in runs]) for name in names)


def targets(r: Results) -> list[Target]:
    """Issue #13's table (with #7's ADD p99 and agent RSS)."""
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
    return out


def _exec_targets(r: Results) -> list[Target]:
    if not r.plugin_exec:
        return []
    first = next(iter(r.plugin_exec.values()))
    floor = r.plugin_exec.get(PLUGIN_FLOOR)
    if floor is None:
        return []
    return [Target("plugin exec median (installed) over the interpreter floor "
                   "(`python3 -I -S -c pass`)", first.median - floor.median, 5.0, "ms",
                   where=f"the plugin {fmt(first.median, 1)} ms, the floor "
                         f"{fmt(floor.median, 1)} ms; see figure 3's split")]


def render(r: Results) -> str:
    out = [BEGIN, "## The CNI path: the plugin and the agent against the reference plugins", ""]
    out += [f"Generated by `{r.command}` ({r.mode} mode) on {r.started}; the whole suite took "
            f"{r.wall_s:.0f} s. Load average (1/5/15 min) at start: {r.load_start}; at the end: "
            f"{r.load_end}. Every figure is min / median / p99 (nearest rank) over n runs; with "
            "fewer than 100 runs p99 is the slowest run. Nothing here is hard-coded: rerun the "
            "command to regenerate this section.", ""]
    out += ["### Machine", "", *md_table(("", ""), list(r.machine.items()))]
    out += ["### Versions", "", *md_table(("component", "version"), list(r.versions.items()))]
    out += _targets_section(r)
    out += _latency_section(r)
    out += _throughput_section(r)
    out += _exec_section(r)
    out += restart_section(r)
    out += nodeid_section(r)
    out += ipam_section(r)
    out += memory_section(r)
    out += scale_section(r)
    return "\n".join([*out, END]).rstrip() + "\n"


def _targets_section(r: Results) -> list[str]:
    return ["### Targets (issue #13, with #7's)", "", *table(targets(r))]


def _latency_section(r: Results) -> list[str]:
    out = ["### 1. CNI ADD / CHECK / DEL latency through libcni (sequential)", "",
           "libcni 1.3.0 driver exec to exit, one pod at a time, a fresh pod namespace per run; "
           f"{OURS}: kernel dataplane, real agent, real etcd; {REFERENCE}: reference plugins "
           "1.9.1. Both run the driver in the same kind of 'host' namespace through nsenter. "
           f"n = {r.latency_runs} runs per verb, after warm-up runs that are not counted.", ""]
    rows = [stat_row(f"{verb} {label}", s)
            for verb in VERBS for label, by_verb in r.latency.items()
            for s in (by_verb[verb],)]
    out += md_table(STAT_HEADER, rows)
    out += [plots.embed(PLOT, "ADD, CHECK and DEL latency: the share of runs at or below each "
                        "time, ours against the reference"), ""]
    ours, ref = r.latency.get(OURS), r.latency.get(REFERENCE)
    if ours and ref:
        out += ["Ratios ours / reference:", ""]
        out += md_table(("verb", "ratio of medians", "ratio of p99s"), [
            [verb, fmt(ratio(ours[verb].median, ref[verb].median), 2),
             fmt(ratio(ours[verb].p99, ref[verb].p99), 2)] for verb in VERBS])
    out += ["#### VPP dataplane", ""]
    if r.vpp and ref:
        out += md_table(STAT_HEADER, [stat_row(f"{v} vswitch-cni (vpp)", r.vpp[v]) for v in VERBS])
        out += md_table(("verb", "ratio of medians to the reference"),
                      [[v, fmt(ratio(r.vpp[v].median, ref[v].median), 2)] for v in VERBS])
    else:
        out += [r.vpp_note or "not measured: no VPP reachable", ""]
    out += ["#### Where an ADD's time goes", "",
            "The agent's own histograms (GET /metrics, `vswitch_cni_add_phase_seconds` and "
            "`vswitch_cni_request_seconds`), differenced over the sequential runs above (the "
            "warm-up included). Means are exact (sum / count); quantiles only to bucket bounds. "
            "What the runtime waits for beyond the agent's handler is the driver's and the "
            "plugin's exec (figure 3) and the gRPC round trip.", ""]
    phases = r.seq_agent.get("phases", {})
    requests = r.seq_agent.get("requests", {})
    out += phase_table(phases, requests.get("ADD"))
    if ours and requests:
        rows = []
        for verb in VERBS:
            h = requests.get(verb)
            if h is None or not h.count:
                continue
            wall = ours[verb].mean
            rows.append([verb, fmt(wall, 1), fmt(h.mean * 1000, 1), fmt(wall - h.mean * 1000, 1),
                         fmt(ref[verb].mean, 1) if ref else "n/a"])
        out += md_table(("verb", "libcni wall mean ms", "agent handler mean ms",
                       "outside the agent (execs, gRPC) ms", "reference wall mean ms"), rows)
        if r.plugin_exec:
            exec_median = next(iter(r.plugin_exec.values())).median
            out += [f"Of the time outside the agent, the plugin's own exec is about "
                    f"{fmt(exec_median, 1)} ms (figure 3, median); the rest is the driver, "
                    "nsenter and the gRPC round trip.", ""]
    return out


def _throughput_section(r: Results) -> list[str]:
    out = ["### 2. Throughput: 16 concurrent runtimes", "",
           "N pods added by 16 threads, each exec'ing the libcni driver; pods/s = N / wall time "
           "from the first exec to the last exit; then the same threads DEL them all. One value "
           "per run.", ""]
    rows = []
    for label, runs in r.throughput.items():
        if not runs:
            continue
        pods = runs[0].pods
        rows.append(stat_row(f"ADD {label} (N = {pods})",
                              Summary.of([t.add_pods_per_s for t in runs], "pods/s")))
        rows.append(stat_row(f"DEL {label} (N = {pods})",
                              Summary.of([t.del_pods_per_s for t in runs], "pods/s")))
        rows.append(stat_row(f"one ADD under load, {label}",
                              Summary.of([x for t in runs for x in t.add_latency], "ms")))
        rows.append(stat_row(f"one DEL under load, {label}",
                              Summary.of([x for t in runs for x in t.del_latency], "ms")))
    out += md_table(STAT_HEADER, rows)
    ours, ref = r.throughput.get(OURS), r.throughput.get(REFERENCE)
    if ours and ref:
        add = ratio(_throughput_median(ours), _throughput_median(ref))
        delete = ratio(_median([t.del_pods_per_s for t in ours]),
                       _median([t.del_pods_per_s for t in ref]))
        out += [f"Ratio of median pods/s, ours / reference: ADD {fmt(add, 2)}, "
                f"DEL {fmt(delete, 2)}.", ""]
    out += _cpu_table(r)
    out += ["ADD phases in the agent during the concurrent runs (ours):", ""]
    out += phase_table(r.tp_agent.get("phases", {}), r.tp_agent.get("requests", {}).get("ADD"))
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
                rows.append([f"{verb} {label}", name, fmt(value, 1)])
            cores = os.cpu_count() or 1
            rows.append([f"{verb} {label}", f"**total** (caps {verb} at "
                         f"{fmt(cores * 1000 / total, 0) if total else 'inf'} pods/s on "
                         f"{cores} cores)", fmt(total, 1)])
    if not rows:
        return []
    return ["Where the CPU goes under concurrency: CPU ms per pod (median over runs), from "
            "getrusage of every exec'd process (nsenter, libcni driver, plugins) and "
            "/proc/PID/stat of the agent and etcd. With every core busy, pods/s cannot exceed "
            "cores x 1000 / total.", "",
            *md_table(("verb, plugin", "consumer", "CPU ms per pod"), rows)]


def _exec_section(r: Results) -> list[str]:
    out = ["### 3. Plugin executable cost", "",
           "Exec to exit of one ADD against a gRPC server that answers at once (no agent work): "
           "the plugin's own cost. The first row is the plugin as the DaemonSet installs it "
           "(agent.install_cni's launcher script and code zip, its interpreter pinned by the "
           "shebang `#!/usr/bin/python3 -IS`); the other rows split that time.", ""]
    out += md_table(STAT_HEADER, [stat_row(label, s) for label, s in r.plugin_exec.items()])
    return out

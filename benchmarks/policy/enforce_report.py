"""benchmarks.policy.enforce's section of BENCHMARKS.md, from its figures (pure)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from benchmarks.core import plots
from benchmarks.core.sections import markers

BEGIN, END = markers("policy-enforce")
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
DATAPLANES = ("kernel", "vpp", "vpp-l2")
CHANGES = (("created → denied", "deny"), ("deleted → allowed", "allow"))
PLOT = "policy-enforce"  # the section's picture: docs/benchmarks/policy-enforce.svg beside --out


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1] if ordered else math.nan


def _enforce_rows(dataplane: str, e: dict[str, Any]) -> list[str]:
    rows = []
    for label, key in (("created: denied", "deny"), ("deleted: allowed", "allow")):
        v = e[key]
        cells = " | ".join(f"{nearest_rank(v, q):.1f}" for _, q in QUANTILES)
        rows.append(f"| {dataplane} | {label} | {len(v)} | {cells} | "
                    f"{max(v, default=math.nan):.1f} | {e['missed']} |")
    return rows


def _add_rows(dataplane: str, f: dict[str, Any]) -> list[str]:
    rows = []
    for live in f["add_on"]:
        off, on = f["add_off"][live], f["add_on"][live]
        pol = on["policy"]
        rows.append(
            f"| {dataplane} | {live} | {off['wall']['median']:.1f} / {off['wall']['p99']:.1f} | "
            f"{on['wall']['median']:.1f} / {on['wall']['p99']:.1f} | "
            f"{off['handler']['mean_ms']:.1f} | {on['handler']['mean_ms']:.1f} | "
            f"{pol['mean_ms']:.2f} (≤ {pol['p50_le_ms']:g} / ≤ {pol['p99_le_ms']:g}) |")
    return rows


def _traffic_rows(dataplane: str, f: dict[str, Any]) -> list[str]:
    return [f"| {dataplane} | {label} | {f[key]['tcp_gbps']:.2f} | {f[key]['retransmits']} | "
            f"{f[key]['rtt_ms']:.3f} |"
            for label, key in (("NetworkPolicy off (no API)", "traffic_off"),
                               ("on, server not isolated", "traffic_on"),
                               (f"on, server isolated: {f['rules']} rules, the client's last",
                                "traffic_rules"))]


def _planes(f: dict[str, Any]) -> list[str]:
    return [d for d in DATAPLANES if d in f]


def plot(f: dict[str, Any], directory: Path) -> Path:
    """The section's picture: the distribution of change-to-enforcement, per dataplane."""
    return plots.cdf(directory / f"{PLOT}.svg", "NetworkPolicy: API change to enforcement",
                     {label: {d: f[d]["enforce"][key] for d in _planes(f)}
                      for label, key in CHANGES}, "ms from the API's answer",
                     "share of changes")


def section(f: dict[str, Any], command: str) -> str:
    a = f["args"]
    planes = _planes(f)
    out = [
        BEGIN, "## NetworkPolicy on a node, end to end (issue #24)", "",
        f"Command: `{command}` (as root, VSWITCH_TEST_KUBE_APISERVER naming kube-apiserver "
        "v1.28; VSWITCH_TEST_VPP_SOCKET VPP 26.06's socket). Started "
        f"{f['started']}; load average {f['load_start']} at the start, {f['load_end']} at the "
        f"end (2 shared cores). {a.get('note') or ''}", "",
        f"A real kube-apiserver holding {f['api']['pods']} Pods on other nodes in "
        f"{f['api']['namespaces']} namespaces and {f['api']['policies']} NetworkPolicies "
        "(benchmarks.policy.compiler's synthetic cluster), plus two standing policies on the "
        "node's workers; the real agent reading it as the shipped ClusterRole's user "
        "(`KubeConfig`); the benchmark as the node's kubelet (Pod objects, the real plugin's ADD "
        "with K8S_POD_*, status IPs). How it measures: the module's docstring. Dataplanes: "
        "kernel; vpp = `Dataplane: vpp`, veth + AF_PACKET, as deployed (the VXLAN node mesh, so "
        "the pods' IPv4 TSO is off: docs/vpp.md); vpp-l2 = the same with `UseL2Interconnect: "
        "true` (the pods keep TSO, as benchmarks.traffic.one_node's VPP rows).", "",
        f"**Change to enforcement**, {a['live'][0]} pods on the node, {a['changes']} times each: "
        "a policy isolating the server created (the client denied) and deleted (allowed again); "
        "ms from the API's answer to the POST / DELETE to the first probe that sees the new "
        "verdict (denied: exact to under 1 ms; allowed: to 10 ms, the probes' timeout; "
        f"{a.get('probe_gap', 0):g} ms between probes). "
        "Nearest rank; missed = no verdict within 15 s.", "",
        "| dataplane | change | n | p50 ms | p90 ms | p99 ms | max ms | missed |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *(r for d in planes for r in _enforce_rows(d, f[d]["enforce"])), "",
        "Tracked connections in the node's namespace before each change (what the agent's "
        "conntrack sweep dumps; the probes add to them): " + ", ".join(
            f"{d} median {statistics.median(f[d]['enforce']['conntrack']):.0f}, max "
            f"{max(f[d]['enforce']['conntrack'])}" for d in planes) + ".", "",
        plots.embed(PLOT, "Change to enforcement: the share of changes enforced within each "
                    "time, per dataplane"), "",
        f"**ADD with NetworkPolicy on and off**: {a['measured']} pods added (each deleted "
        "again) with the given number of pods live; wall = the plugin's exec (median / slowest, "
        "ms); handler = the agent's ADD (mean of `vswitch_cni_request_seconds`); policy = the "
        "ADD's `policy` phase (`vswitch_cni_add_phase_seconds`: mean ms, and the buckets that "
        "hold p50 / p99).", "",
        "| dataplane | live pods | wall, off | wall, on | handler ms, off | handler ms, on | "
        "policy phase ms |", "| --- | --- | --- | --- | --- | --- | --- |",
        *(r for d in planes for r in _add_rows(d, f[d])), "",
        f"**Per packet**, client -> server on the node: iperf3, one TCP stream for "
        f"{a['seconds']} s; ping RTT average of {a['pings']} pings 10 ms apart. Every rule but "
        "the last names another /16 and port, so the client's new connections walk them all.",
        "", "| dataplane | setup | TCP Gbit/s | retransmits | RTT ms |",
        "| --- | --- | --- | --- | --- |",
        *(r for d in planes for r in _traffic_rows(d, f[d])),
    ]
    if "vpp_note" in f:
        out += ["", f"VPP: {f['vpp_note']}."]
    return "\n".join([*out, END, ""])

"""What the CNI suite measured (one `Results`), and the table of the agent's ADD phases that
several of its sections show."""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.cni.full_node import AtScale
from benchmarks.cni.ipam_core import IpamFigures
from benchmarks.cni.nodeid import Race
from benchmarks.cni.restart import RestartFigures
from benchmarks.cni.verbs import Throughput
from benchmarks.core.agent_metrics import Histogram
from benchmarks.core.markdown import fmt, md_table
from benchmarks.core.stats import Summary

MB = 1024 * 1024
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
    # every sequential latency behind `latency` and `vpp`, in ms: series label -> verb -> runs
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    vpp: dict[str, Summary] | None = None
    vpp_note: str = ""
    seq_agent: dict[str, dict[str, Histogram]] = field(default_factory=dict)
    throughput: dict[str, list[Throughput]] = field(default_factory=dict)
    tp_agent: dict[str, dict[str, Histogram]] = field(default_factory=dict)
    plugin_exec: dict[str, Summary] = field(default_factory=dict)
    restart: RestartFigures | None = None
    nodeid: list[Race] = field(default_factory=list)
    ipam: IpamFigures | None = None
    scale: dict[str, AtScale] = field(default_factory=dict)  # "kernel" / "vpp"
    # the VPP agent's ADD phases and VPP requests over the whole full-node run (fill and DELs)
    scale_vpp: dict[str, dict[str, Histogram]] = field(default_factory=dict)
    vpp_ring_mib: float | None = None  # the default AF_PACKET rings of one pod interface
    load_end: str = ""
    wall_s: float = 0.0


def phase_table(hists: dict[str, Histogram], verb_hist: Histogram | None) -> list[str]:
    total = sum(hists[p].sum for p in ADD_PHASES if p in hists)
    rows = []
    for phase in ADD_PHASES:
        h = hists.get(phase)
        if h is None or not h.count:
            continue
        share = h.sum / total * 100 if total else 0.0
        rows.append([phase, str(int(h.count)), fmt(h.mean * 1000, 2), f"{share:.0f}%",
                     f"≤ {fmt(h.quantile_bound(0.5) * 1000, 1)}",
                     f"≤ {fmt(h.quantile_bound(0.99) * 1000, 1)}"])
    if verb_hist is not None and verb_hist.count:
        rows.append(["whole ADD in the agent (gRPC handler)", str(int(verb_hist.count)),
                     fmt(verb_hist.mean * 1000, 2), "",
                     f"≤ {fmt(verb_hist.quantile_bound(0.5) * 1000, 1)}",
                     f"≤ {fmt(verb_hist.quantile_bound(0.99) * 1000, 1)}"])
    return md_table(("phase", "count", "mean ms", "share of phases", "p50 bucket ms",
                   "p99 bucket ms"), rows)

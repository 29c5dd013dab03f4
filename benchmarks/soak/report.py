"""The soak's figures (benchmarks/soak): slopes per 1,000 cycles with a verdict, latency of the
first window against the last, leak counts, log lines; rendered as BENCHMARKS.md's soak section.

Flat or not (benchmarks/soak/trend.py): least-squares slopes over the first and the second half of
the run, with standard errors widened for the samples' autocorrelation; the second half decides
(the first holds the warm-up: allocator arenas, caches, the first pods' interpreter imports). A
figure is flat when its second-half slope is within two standard errors of zero or the change it
predicts over the whole run is below the figure's resolution (one fd, one thread, 1 MiB of RSS,
...); it levels off when it still grows but clearly slower than in the first half; otherwise it
grows (or shrinks). The slope over the whole run is shown beside them.

The section sits between its markers in the markdown file (benchmarks.core.sections).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.core import plots
from benchmarks.core.sections import markers
from benchmarks.soak.trend import Trend, trend
from testbed.vpplog import Attribution

BEGIN, END = markers("soak")
PLOT = "soak"  # the section's picture: docs/benchmarks/soak.svg beside the markdown file
LATENCY_TOLERANCE = 0.10  # the last window's median within 10 % of the first's

# (key, label, resolution, judged): what the slopes table shows, the smallest change that
# counts, and whether the figure is the soak's own (judged) or the node's whole, which other
# users of the machine and of its VPP move too (shown for context).
FIGURES: list[tuple[str, str, float, bool]] = [
    ("agent_rss_kib", "agent RSS (KiB)", 1024, True),
    ("agent_threads", "agent threads", 1, True),
    ("agent_fds", "agent open fds", 1, True),
    ("vpp_heap_used_kib", "VPP main heap used (KiB)", 1024, True),
    ("vpp_api_trace_items", "VPP API trace items (all users)", 1, False),
    ("vpp_rss_kib", "VPP RSS (KiB)", 1024, True),
    ("vpp_fds", "VPP open fds", 1, True),
    ("vpp_interfaces_live_pods", "VPP interfaces of the soak's pods", 1, True),
    ("vpp_routes_pod_vrf", "VPP routes in the soak's pod VRF", 1, True),
    ("vpp_neighbors_live_pods", "VPP neighbors on the soak's pods' interfaces", 1, True),
    ("vpp_interfaces_all", "VPP interfaces (all users)", 1, False),
    ("vpp_neighbors_all", "VPP neighbors (all users)", 1, False),
    ("vpp_fib_entries", "VPP FIB entries in use (all users)", 1, False),
    ("vpp_ping_ms", "VPP control ping (ms)", 50, False),
    ("etcd_keys", "etcd keys under the agent's prefix", 1, True),
    ("allocations", "allocations (agent REST)", 1, True),
    ("links_live_pods", "host links of live pods", 1, True),
    ("routes_pod_range", "host routes into the pod range", 1, True),
    ("nft_rules_ours", "nftables rules (agent's table + Service)", 1, True),
    ("links_all", "host links (whole node)", 1, False),
    ("routes_all", "host routes (whole node)", 1, False),
    ("nft_rules_all", "nftables rules (whole node)", 1, False),
    ("conntrack", "conntrack entries (whole node)", 64, False),
]
# (key, label, expected with N live pods, expected after the last DEL; None: N)
LEAKS: list[tuple[str, str]] = [
    ("vpp_interfaces_dead_pods", "VPP interfaces of deleted pods"),
    ("vpp_routes_dead_pods", "VPP routes to deleted pods' addresses"),
    ("vpp_neighbors_dead_pods", "VPP neighbors of deleted pods"),
    ("links_dead_pods", "host links of deleted pods"),
    ("routes_dead_pods", "host routes to deleted pods' addresses"),
]
LIVE_COUNTS: list[tuple[str, str]] = [
    ("vpp_interfaces_live_pods", "VPP interfaces of live pods"),
    ("links_live_pods", "host links of live pods"),
    ("etcd_pods", "etcd pod records"),
    ("etcd_ipam", "etcd allocation keys"),
    ("records", "pod records (agent REST)"),
    ("allocations", "allocations (agent REST)"),
]


@dataclass
class Window:
    cycle: int  # cycles done when sampled
    seconds: float
    load1: str
    add_ms: list[float]
    del_ms: list[float]
    failures: int
    values: dict[str, float]


@dataclass
class DataplaneRun:
    dataplane: str
    pods: int
    window: int
    cycles: int = 0
    seconds: float = 0.0
    failures: int = 0
    details: list[str] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    leaks_live: dict[str, float] = field(default_factory=dict)
    leaks_empty: dict[str, float] = field(default_factory=dict)
    final_del_ms: list[float] = field(default_factory=list)
    vpp_pings: int = 0  # control pings once a second over the whole run (testbed/vpp.VppWatch)
    vpp_unanswered: int = 0
    vpp_slowest_ms: float = 0.0
    vpp_log: Attribution | None = None
    vpp_log_path: str = ""
    agent_lines: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def leak_counts(self) -> dict[str, tuple[float, float]]:
        """{label: (left beyond the live pods with N live, left after the last DEL)}."""
        out = {label: (self.leaks_live.get(key, 0.0), self.leaks_empty.get(key, 0.0))
               for key, label in LEAKS if key in self.leaks_live}
        for key, label in LIVE_COUNTS:
            if key in self.leaks_live:
                out[f"{label} beyond the live ones"] = (self.leaks_live[key] - self.pods,
                                                        self.leaks_empty.get(key, 0.0))
        return out

    @property
    def vpp_silent(self) -> int:
        """Samples at which VPP did not answer its control ping."""
        return sum(w.values.get("vpp_answers", 1.0) == 0.0 for w in self.windows)

    @property
    def clean(self) -> bool:
        leaks = any(a or b for a, b in self.leak_counts().values())
        caused = self.vpp_log is not None and bool(self.vpp_log.caused_by_client)
        return not (self.failures or leaks or caused or self.vpp_silent or self.vpp_unanswered)


def slope(run: DataplaneRun, key: str, resolution: float) -> Trend | None:
    return trend([(float(w.cycle), w.values[key]) for w in run.windows if key in w.values],
                 resolution)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile `q` (0-100) of `values`."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


@dataclass(frozen=True)
class Latency:
    n: int
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: list[float]) -> Latency:
        return cls(len(values), *(percentile(values, q) for q in (50, 90, 99)))

    def __str__(self) -> str:
        return f"{self.p50:.0f} / {self.p90:.0f} / {self.p99:.0f} (n={self.n})"


def latency(run: DataplaneRun) -> dict[str, tuple[Latency, Latency, str]]:
    """{verb: (first full window, last full window, verdict on the medians)} of ADD and DEL."""
    full = [w for w in run.windows if len(w.add_ms) >= max(1, run.window // 2)]
    out: dict[str, tuple[Latency, Latency, str]] = {}
    if len(full) < 2:
        return out
    for verb in ("ADD", "DEL"):
        first, last = (Latency.of(w.add_ms if verb == "ADD" else w.del_ms)
                       for w in (full[0], full[-1]))
        change = last.p50 / first.p50 - 1
        verdict = ("met" if abs(change) <= LATENCY_TOLERANCE
                   else f"**missed** ({change:+.0%})")
        out[verb] = (first, last, f"{verdict} ({change:+.1%})" if verdict == "met" else verdict)
    return out


def solve3(m: list[list[float]], v: list[float]) -> list[float] | None:
    """x with m x = v for a 3x3 system (Cramer's rule); None when singular."""
    def det(a: list[list[float]]) -> float:
        return (a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
                - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
                + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]))
    d = det(m)
    if abs(d) < 1e-12:
        return None
    out = []
    for col in range(3):
        swapped = [[v[r] if c == col else m[r][c] for c in range(3)] for r in range(3)]
        out.append(det(swapped) / d)
    return out


def drift(run: DataplaneRun, verb: str) -> float | None:
    """The per-window median's drift in ms per 1,000 cycles with the machine's load taken out:
    least squares of p50 = a + b * cycle + c * load1 over the full windows; b * 1000."""
    rows = [(float(w.cycle), float(w.load1.split()[0]),
             percentile(w.add_ms if verb == "ADD" else w.del_ms, 50))
            for w in run.windows if len(w.add_ms) >= max(1, run.window // 2) and w.del_ms]
    if len(rows) < 5:
        return None
    xs = [(1.0, c, load) for c, load, _ in rows]
    m = [[sum(x[i] * x[j] for x in xs) for j in range(3)] for i in range(3)]
    v = [sum(x[i] * r[2] for x, r in zip(xs, rows, strict=True)) for i in range(3)]
    solved = solve3(m, v)
    return None if solved is None else solved[1] * 1000


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def render(header: dict[str, Any], runs: list[DataplaneRun]) -> str:
    out = [BEGIN, "## Soak: pod churn for hours (issue #27)", ""]
    out += [f"Command: `{header['command']}` (as root, from the checkout). Started "
            f"{header['started']}; load average {header['load_start']} at the start, "
            f"{header['load_end']} at the end (2 shared cores; other engineers' tests ran on "
            f"the machine and its VPP meanwhile). Machine: "
            + ", ".join(f"{k} {v}" for k, v in header["machine"].items())
            + f". Code: {header['commit']}. Random seed {header['seed']}. VPP's log: "
            f"{header['vpp_log']}.", ""]
    out += ["One cycle: the oldest pod's servers stop, its CNI DEL through libcni and the "
            "plugin, its namespace removed; a new namespace, its ADD, its servers; the new pod "
            "reaches a random older pod over TCP, and the Service stand-in (a DNAT on the node "
            "in a table of its own, pointed at another pod every cycle) answers it over TCP and "
            "UDP. Every window: a sample of everything below, and the new pod reaches every "
            "live pod over TCP. Slopes per 1,000 cycles: least squares over the first and the "
            "second half of the samples, ± two standard errors widened for the samples' "
            "autocorrelation (a memory figure moves in steps that stay; "
            "benchmarks/soak/trend.py); the second half decides, since the first holds the "
            "warm-up: **flat** when its slope is within two standard errors of zero or predicts "
            "less than the figure's resolution over the run (1 MiB of memory, 1 fd, 1 object); "
            "**levels off** when it still grows, but slower than in the first half by more than "
            "two standard errors of the difference. "
            "Leak counts: what is left of deleted pods with the live pods still up, and of "
            "all pods after the last DEL. Why the figures that grow grow, and how a day's run "
            "is made: [docs/soak.md](docs/soak.md).", ""]
    out += [plots.embed(PLOT, "Agent RSS, open fds and ADD / DEL latency (window medians) over "
                        "the cycles, per dataplane"), ""]
    for run in runs:
        out += _run_section(run)
    out += [END, ""]
    return "\n".join(out)


def plot(runs: list[DataplaneRun], directory: Path) -> Path:
    """The section's picture: the trends over cycles, a line per dataplane."""
    def panel(title: str, unit: str, value: Callable[[Window], float | None]) -> plots.Lines:
        series = {}
        for run in runs:
            points = [(float(w.cycle), y) for w in run.windows if (y := value(w)) is not None]
            series[run.dataplane] = ([x for x, _ in points], [y for _, y in points])
        return plots.Lines(title, unit, series)

    def p50(values: list[float]) -> float | None:
        return percentile(values, 50) if values else None

    return plots.lines(directory / f"{PLOT}.svg", "Soak: pod churn", [
        panel("agent RSS", "MiB", lambda w: w.values["agent_rss_kib"] / 1024),
        panel("agent open fds", "fds", lambda w: w.values["agent_fds"]),
        panel("ADD latency, window median", "ms", lambda w: p50(w.add_ms)),
        panel("DEL latency, window median", "ms", lambda w: p50(w.del_ms)),
    ], "cycles done")


def _run_section(run: DataplaneRun) -> list[str]:
    rate = run.cycles / run.seconds if run.seconds else 0.0
    out = [f"### {run.dataplane} dataplane", "",
           f"{run.pods} live pods; **{run.cycles} cycles** in {run.seconds / 60:.1f} min "
           f"({rate:.2f} cycles/s, {run.cycles * 2} CNI requests), sampled every {run.window} "
           f"cycles; **{run.failures} failed checks**"
           + (f", VPP silent at {run.vpp_silent} samples" if run.vpp_silent else "")
           + ".", ""]
    if run.vpp_pings:
        out += [f"VPP answered **{run.vpp_pings - run.vpp_unanswered} of {run.vpp_pings}** "
                f"control pings sent once a second for the whole run (slowest "
                f"{run.vpp_slowest_ms:.0f} ms).", ""]
    out += [f"- {d}" for d in run.details[:10]]
    out += ["", "| figure | first sample | last sample | slope / 1,000 cycles: 1st half "
            "| 2nd half | whole run | verdict |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for key, label, resolution, judged in FIGURES:
        s = slope(run, key, resolution)
        if s is not None:
            verdict = s.verdict if s.verdict == "flat" else f"**{s.verdict}**"
            if not judged:
                verdict = f"({s.verdict}: context)"
            out.append(f"| {label} | {_fmt(s.first)} | {_fmt(s.last)} | "
                       f"{s.early * 1000:+.2f} ± {2 * s.early_se * 1000:.2f} | "
                       f"{s.late * 1000:+.2f} ± {2 * s.late_se * 1000:.2f} | "
                       f"{s.whole * 1000:+.2f} | {verdict} |")
    full = [w for w in run.windows if len(w.add_ms) >= max(1, run.window // 2)]
    loads = (f" (load {full[0].load1.split()[0]} then {full[-1].load1.split()[0]})"
             if len(full) >= 2 else "")
    out += ["", f"| verb | first window p50 / p90 / p99 (ms) | last window p50 / p90 / p99 (ms)"
            f"{loads} | within 10 % (p50) | p50 drift, load taken out (ms / 1,000 cycles) |",
            "| --- | --- | --- | --- | --- |"]
    for verb, (first, last, verdict) in latency(run).items():
        d = drift(run, verb)
        out.append(f"| {verb} | {first} | {last} | {verdict} | "
                   f"{'-' if d is None else f'{d:+.1f}'} |")
    out += ["", "| leak count | with the live pods up | after the last DEL |",
            "| --- | --- | --- |"]
    out += [f"| {label} | {a:.0f} | {b:.0f} |" for label, (a, b) in run.leak_counts().items()]
    out += ["", *_series(run), "", *_logs(run), ""]
    return out


def _series(run: DataplaneRun) -> list[str]:
    """About ten samples over the run, for a look at the shape."""
    step = max(1, len(run.windows) // 10)
    picked = run.windows[::step] + ([run.windows[-1]] if (len(run.windows) - 1) % step else [])
    head = "| cycle | min | agent RSS MiB | fds | threads | ADD p50 ms | DEL p50 ms | failures"
    head += " | VPP heap MiB | VPP FIB entries | load |" if run.dataplane == "vpp" else " | load |"
    out = [head, "|" + " --- |" * (head.count("|") - 1)]
    for w in picked:
        v = w.values
        row = (f"| {w.cycle} | {w.seconds / 60:.1f} | {v['agent_rss_kib'] / 1024:.1f} | "
               f"{v['agent_fds']:.0f} | {v['agent_threads']:.0f} | {_median(w.add_ms)} | "
               f"{_median(w.del_ms)} | {w.failures} |")
        if run.dataplane == "vpp":
            row += (f" {v.get('vpp_heap_used_kib', 0) / 1024:.2f} | "
                    f"{v.get('vpp_fib_entries', 0):.0f} |")
        out.append(row + f" {w.load1} |")
    return out


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.0f}" if values else "-"


def _logs(run: DataplaneRun) -> list[str]:
    out: list[str] = []
    if run.vpp_log is not None:
        a = run.vpp_log
        deletes = run.cycles + run.pods + 1  # every pod's AF_PACKET interface + the interconnect
        out += [f"VPP's log ({run.vpp_log_path}), lines about the soak's AF_PACKET interfaces: "
                f"**{len(a.device_gone_first)} from a device gone before VPP's interface**, "
                f"**{len(a.unbound_delete)} from deletes of unbound names**, "
                f"{len(a.vpp_own)} of VPP 26.06's own `epoll_ctl() failed ... errno 9` "
                f"(one per AF_PACKET interface deleted; {deletes} were); {len(a.other)} "
                "error lines about other users' objects or of other kinds.", ""]
        for line in (a.device_gone_first + a.unbound_delete)[:5] + a.other[:5]:
            out.append(f"    {line}")
    out += ["", f"Agent log: {len(run.agent_lines)} WARNING/ERROR lines."]
    out += [f"    {line[:200]}" for line in run.agent_lines[:10]]
    return out

"""The results of benchmarks/traffic/mesh.py and their section of BENCHMARKS.md (pure: no I/O).

`Row`s are what is measured per setup, `SetupResult` what one setup gave (values per row, or why
it was skipped or failed), `render` the markdown between BEGIN and END: one table with a column
per setup and, per VPP setup, its ratio to the kernel setup's row.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.core.sections import markers

BEGIN, END = markers("mesh-traffic")
BASELINE = "kernel"  # the setup every other one is compared with


@dataclass(frozen=True)
class Row:
    key: str
    kind: str  # tcp (Gbit/s), rtt (ms), udp (loss %)
    label: str

    @property
    def digits(self) -> int:
        return 3 if self.kind == "rtt" else 2


ROWS = (
    Row("tcp-same-v4", "tcp", "TCP Gbit/s, pod -> pod, same node, IPv4"),
    Row("tcp-same-v6", "tcp", "TCP Gbit/s, pod -> pod, same node, IPv6"),
    Row("tcp-across-v4", "tcp", "TCP Gbit/s, pod -> pod, across nodes, IPv4"),
    Row("tcp-across-v6", "tcp", "TCP Gbit/s, pod -> pod, across nodes, IPv6"),
    Row("tcp-svc-same", "tcp", "TCP Gbit/s, pod -> ClusterIP, backend on the same node"),
    Row("tcp-svc-across", "tcp", "TCP Gbit/s, pod -> ClusterIP, backend on the other node"),
    Row("rtt-same", "rtt", "RTT ms, pod -> pod, same node, IPv4"),
    Row("rtt-across", "rtt", "RTT ms, pod -> pod, across nodes, IPv4"),
    Row("udp-same", "udp", "UDP loss % at 1 Gbit/s offered, same node, IPv4"),
    Row("udp-across", "udp", "UDP loss % at 1 Gbit/s offered, across nodes, IPv4"),
)
ROW_LABELS = {r.key: r.label for r in ROWS}


@dataclass(frozen=True)
class Counts:
    runs: int  # repetitions of every row
    seconds: int  # iperf3's -t
    pings: int  # per RTT measurement


FULL = Counts(runs=3, seconds=5, pings=100)
QUICK = Counts(runs=1, seconds=1, pings=10)


@dataclass
class SetupResult:
    name: str
    config: dict[str, Any]
    status: str = "ok"  # ok, failed (see note), skipped (see note)
    note: str = ""
    values: dict[str, list[float]] = field(default_factory=dict)  # row key -> one per run
    errors: dict[str, str] = field(default_factory=dict)  # row key -> what broke it
    retransmits: dict[str, list[int]] = field(default_factory=dict)  # TCP rows: iperf3's sender
    pod_tso: dict[str, bool] = field(default_factory=dict)  # feature -> on (testbed.pods.sends_tso)
    load_start: str = ""
    load_end: str = ""
    loads: list[float] = field(default_factory=list)  # 1-minute load after each measurement
    seconds: float = 0.0

    def median(self, key: str) -> float | None:
        values = self.values.get(key, [])
        return statistics.median(values) if values else None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "medians": {r.key: self.median(r.key) for r in ROWS}}


def cell(result: SetupResult, row: Row) -> str:
    """median (min-max) of the runs; the error or the setup's status where none."""
    if result.status != "ok":
        return result.status
    if row.key in result.errors:
        return "**failed**"
    values = result.values.get(row.key, [])
    if not values:
        return "-"
    med = f"{statistics.median(values):.{row.digits}f}"
    if len(values) == 1:
        return med
    return f"{med} ({min(values):.{row.digits}f}-{max(values):.{row.digits}f})"


def compare(result: SetupResult, base: SetupResult | None, row: Row) -> str:
    """The setup's median over the kernel's: a ratio; for loss the difference in points (a
    ratio of percentages near 0 says nothing)."""
    mine = result.median(row.key)
    theirs = base.median(row.key) if base is not None and base.status == "ok" else None
    if mine is None or theirs is None:
        return "-"
    if row.kind == "udp":
        return f"{mine - theirs:+.2f} points"
    return f"{mine / theirs:.2f} x" if theirs else "-"


def table(results: list[SetupResult]) -> list[str]:
    base = next((r for r in results if r.name == BASELINE), None)
    head, rule = ["row (mesh on)"], ["---"]
    for r in results:
        head.append(f"`{r.name}`")
        rule.append("---")
        if r.name != BASELINE:
            head.append(f"`{r.name}` / `{BASELINE}`")
            rule.append("---")
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(rule) + " |"]
    for row in ROWS:
        cells = [f"{row.label}, mesh on"]
        for r in results:
            cells.append(cell(r, row))
            if r.name != BASELINE:
                cells.append(compare(r, base, row))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def retransmit_table(results: list[SetupResult]) -> list[str]:
    """TCP retransmits per run (median), the setups that measured something as columns."""
    measured = [r for r in results if r.status == "ok"]
    if not measured:
        return []
    lines = ["| TCP retransmits per run (median) | " + " | ".join(f"`{r.name}`" for r in measured)
             + " |", "| --- |" + " --- |" * len(measured)]
    for row in ROWS:
        if row.kind == "tcp":
            cells = [str(round(statistics.median(r.retransmits[row.key])))
                     if r.retransmits.get(row.key) else "-" for r in measured]
            lines.append(f"| {row.label.removeprefix('TCP Gbit/s, ')} | " + " | ".join(cells)
                         + " |")
    return [*lines, ""]


def _setup_lines(results: list[SetupResult]) -> list[str]:
    out = []
    for r in results:
        keys = ", ".join(f"{k}: {v}" for k, v in r.config.items())
        tso = ", ".join(f"{k} {'on' if v else 'off'}" for k, v in r.pod_tso.items())
        during = (f" (1-minute load after each measurement: median "
                  f"{statistics.median(r.loads):.2f}, max {max(r.loads):.2f})" if r.loads else "")
        what = {"ok": f"measured in {r.seconds:.0f} s, load {r.load_start} -> {r.load_end}"
                      + during,
                "failed": f"**failed**: {r.note}", "skipped": f"skipped: {r.note}"}[r.status]
        towards = "; the pods' TCP towards the vswitch (eth0's, or a pool pod's macvlan link's)"
        out.append(f"- `{r.name}` (`{keys}`): {what}" + (f"{towards}: {tso}" if tso else ""))
        out += [f"  - {ROW_LABELS[k]}: **failed**: {e}" for k, e in r.errors.items()]
    return out


def render(header: dict[str, Any], results: list[SetupResult]) -> str:
    counts: Counts = header["counts"]
    m = header["machine"]
    note = f" {header['note']}" if header.get("note") else ""
    out = [
        BEGIN, "## Pod traffic with the node mesh on (issue #25)", "",
        f"Command: `{header['command']}` (as root, from the checkout). Started "
        f"{header['started']}; load average (1/5/15 min) {header['load_start']} at the start, "
        f"{header['load_end']} at the end ({m['cores (os.cpu_count)']} cores shared with other "
        f"work).{note} Machine: {m['CPU']}, {m['memory']}, kernel {m['kernel']}, {m['OS']}. "
        f"Code measured: {header['commit']}.", "",
        "Two nodes of the one-machine cluster (testbed/cluster.py: node namespaces on a fabric "
        "bridge, a real etcd, a real `vswitch-agent` per node with its node IP set and the "
        "node mesh on, dual-stack pod subnets, MTU 1500 uplinks, pod MTU 1450); pods a and b on "
        "node-1, c on node-2, added through the real `vswitch-cni`. Same node: a -> b; across "
        "nodes: a -> c. ClusterIP: a stand-in Service (kube-proxy's DNAT, an nftables table of "
        "the benchmark's on node-1, testbed/service.py) with its one backend b (same node) or "
        "c (the other node). VPP setups: a real VPP per node namespace "
        "(VSWITCH_TEST_VPP_START / _STOP / _MESH_SOCKET), veth + AF_PACKET pods.", "",
        f"iperf3, one TCP stream for {counts.seconds} s; UDP 1400-byte datagrams at 1 Gbit/s "
        f"offered for {counts.seconds} s; RTT the average of {counts.pings} pings 10 ms apart. "
        f"Each row {counts.runs} time(s), the rows interleaved; cells: median (min-max). "
        f"Ratios: the setup's median over `{BASELINE}`'s (UDP loss: the difference in "
        "points).", "",
        *_setup_lines(results), "",
        *table(results), "",
        *retransmit_table(results),
        END, "",
    ]
    return "\n".join(out)

"""ADD and DEL at 100+ live pods with the kernel's RCU grace periods normal and expedited (issue
#25: VPP ADD <= 1.3x the kernel's; agent/linux/rcu, `ExpediteKernelRcu`).

    VSWITCH_TEST_VPP_SOCKET=/run/vpp/api.sock python -m benchmarks run rcu-add \
        [--rounds 2] [--live 100] [--measured 30] [--burst 48] [--out BENCHMARKS.md]

As root, with a running VPP. Each round sets /sys/kernel/rcu_expedited to 0, then to 1, and
under each runs benchmarks.cni.full_node's measurement (pods added through libcni one at a time
until `live` are up, then `measured` more ADDs, then the DELs) for three agents one after the
other: the kernel dataplane, and VPP in veth + AF_PACKET mode with `VppPodPool` 0 and 4 (the
VPP agents have `ExpediteKernelRcu: true` under 1, as an operator would; VppPodPool's default,
4 under either, is marked). VPP's figures are compared with the kernel
dataplane's of the same round and knob. The agents' histograms
(benchmarks.core.agent_metrics) give the mean `wire` phase and `af_packet_create_v3`. Then each
setup's burst (`--burst` pods, 0: none), on an agent of its own with no pod up: the pods added by
16 runtimes at once and deleted the same way (benchmarks.cni.verbs.throughput, figure 2's
measure), as a Deployment's pods reach a node together. The knob is machine-wide; its value from
before the run is written back at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.linux.rcu import KNOB
from benchmarks.cni.full_node import Bench, agent_network, bench, measure_agent
from benchmarks.cni.verbs import Throughput, throughput
from benchmarks.core import agent_metrics, machine
from benchmarks.core.sections import markers, write_section

BEGIN, END = markers("rcu-add")
SETUPS = ("kernel", "vpp, VppPodPool 0", "vpp, VppPodPool 4")
DEFAULT = "vpp, VppPodPool 4"  # VppPodPool unset, whatever the knob


@dataclass
class Row:
    round: int
    knob: int
    setup: str
    add_ms: float
    add_p99_ms: float
    del_ms: float
    wire_ms: float | None
    create_ms: float | None
    load: str
    burst: Throughput | None = None  # the 16-runtime burst on an agent of its own
    churn_ms: float | None = None  # median ADD of a pod replacing a pod, node full


def agent_extra(setup: str, knob: int, socket: str) -> dict[str, Any]:
    if setup == "kernel":
        return {}
    return {"Dataplane": "vpp", "VPPAPISocket": socket, "UseTAPInterfaces": False,
            "ExpediteKernelRcu": bool(knob), "VppPodPool": int(setup.rsplit(" ", 1)[1])}


@contextmanager
def knob_restored() -> Iterator[None]:
    with open(KNOB) as f:
        before = f.read().strip()
    try:
        yield
    finally:
        set_knob(before)


def set_knob(value: int | str) -> None:
    with open(KNOB, "w") as f:
        f.write(str(value))


def _mean_ms(series: dict[str, agent_metrics.Histogram], key: str) -> float | None:
    h = series.get(key)
    return 1000 * h.sum / h.count if h is not None and h.count else None


def measure_burst(b: Bench, name: str, extra: dict[str, Any], count: int) -> Throughput:
    """`count` pods added by 16 runtimes at once, then deleted so, on an agent of its own."""
    with agent_network(b, name, extra) as (_, net):
        return throughput(net, b.namespaces, count, {})


def measure(rounds: int, live: int, measured: int, burst: int, socket: str,
            churn: int = 0) -> list[Row]:
    rows: list[Row] = []
    with knob_restored(), bench("rcu") as b:
        for r in range(1, rounds + 1):
            for knob in (0, 1):
                set_knob(knob)
                for setup in SETUPS:
                    name = f"rcu{r}{knob}{SETUPS.index(setup)}"
                    extra = agent_extra(setup, knob, socket)
                    res = measure_agent(b, name, extra, live, measured,
                                        socket if setup != "kernel" else "", churn)
                    row = Row(r, knob, setup, res.figures.add.median, res.figures.add.p99,
                              res.figures.delete.median, _mean_ms(res.phases, "wire"),
                              _mean_ms(res.vpp_calls, "af_packet_create_v3"),
                              machine.loadavg().split()[0])
                    if res.figures.churn is not None:
                        row.churn_ms = res.figures.churn.median
                    if burst:
                        row.burst = measure_burst(b, name + "b", extra, burst)
                    rows.append(row)
                    print(f"round {r} knob {knob} {setup}: ADD {row.add_ms:.1f} ms (p99 "
                          f"{row.add_p99_ms:.1f}), DEL {row.del_ms:.1f} ms, churn ADD "
                          f"{_ms(row.churn_ms)} ms, {_burst(row)}, load {row.load}", flush=True)
    return rows


def ratio(rows: list[Row], row: Row, field: str = "add_ms") -> float | None:
    """`row`'s `field` over the kernel dataplane's of its round and knob (None: not measured)."""
    kernel = next(k for k in rows if (k.round, k.knob, k.setup) == (row.round, row.knob,
                                                                    "kernel"))
    mine, theirs = getattr(row, field), getattr(kernel, field)
    return None if mine is None or not theirs else float(mine / theirs)


def _x(value: float | None) -> str:
    return "" if value is None else f"{value:.2f} x"


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _burst(row: Row) -> str:
    """The burst's cells: ADD pods/s (median ms), DEL pods/s (median ms)."""
    t = row.burst
    if t is None:
        return " | "
    return (f"{t.add_pods_per_s:.1f} ({statistics.median(t.add_latency):.0f}) | "
            f"{t.del_pods_per_s:.1f} ({statistics.median(t.del_latency):.0f})")


def _median_rate(rows: list[Row], verb: str) -> str:
    rates = [getattr(r.burst, f"{verb}_pods_per_s") for r in rows if r.burst is not None]
    return f"{statistics.median(rates):.1f}" if rates else ""


def _agent(setup: str) -> str:
    return setup + (" (the default)" if setup == DEFAULT else "")


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def section(rows: list[Row], command: str, load: tuple[str, str], live: int) -> str:
    lines = [
        BEGIN, "## VPP ADD and the kernel's RCU grace periods (issue #25)", "",
        f"Command: `{command}` (as root, VPP 26.06 running; how: the module's docstring). "
        f"ADD and DEL at {live}+ live pods through libcni, as section 8. Load average "
        f"{load[0]} at the start, {load[1]} at the end. Code: {machine.git_commit()}.", "",
        "| round | rcu_expedited | agent | ADD ms (p99) | DEL ms | ADD / kernel ADD | "
        "churn ADD ms | churn ADD / kernel's | "
        "`wire` mean ms | `af_packet_create_v3` mean ms | burst ADD pods/s (median ms) | "
        "burst DEL pods/s (median ms) | 1-min load after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        lines.append(
            f"| {row.round} | {row.knob} | {_agent(row.setup)} | "
            f"{row.add_ms:.1f} ({row.add_p99_ms:.1f}) | {row.del_ms:.1f} | "
            f"{_x(ratio(rows, row))} | {_ms(row.churn_ms)} | "
            f"{_x(ratio(rows, row, 'churn_ms'))} | {_ms(row.wire_ms)} | {_ms(row.create_ms)} | "
            f"{_burst(row)} | {row.load} |")
    lines += ["", "Medians over the rounds:", "",
              "| rcu_expedited | agent | ADD ms | DEL ms | ADD / kernel ADD | churn ADD ms | "
              "churn ADD / kernel's | burst ADD pods/s | burst DEL pods/s |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for knob in (0, 1):
        for setup in SETUPS:
            mine = [r for r in rows if (r.knob, r.setup) == (knob, setup)]
            if not mine:
                continue
            lines.append(
                f"| {knob} | {_agent(setup)} | "
                f"{statistics.median(r.add_ms for r in mine):.1f} | "
                f"{statistics.median(r.del_ms for r in mine):.1f} | "
                f"{_x(_median([ratio(rows, r) for r in mine]))} | "
                f"{_ms(_median([r.churn_ms for r in mine]))} | "
                f"{_x(_median([ratio(rows, r, 'churn_ms') for r in mine]))} | "
                f"{_median_rate(mine, 'add')} | {_median_rate(mine, 'del')} |")
    lines += ["", "The VPP agents run veth + AF_PACKET pods, with `ExpediteKernelRcu: true` "
              "under 1. Churn: with the node full, pods replacing pods one at a time (the "
              "oldest pod's DEL, then a new pod's ADD), as a rollout does. "
              "Burst: pods added by 16 runtimes at once on an agent with no pod up, "
              "then deleted so; pods/s = pods / wall time (figure 2's measure). "
              "\"The default\": what `VppPodPool` unset gives (docs/vpp.md, \"The pod "
              "pool\").", END, ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--live", type=int, default=100)
    parser.add_argument("--measured", type=int, default=30)
    parser.add_argument("--burst", type=int, default=48, help="pods per burst (0: none)")
    parser.add_argument("--churn", type=int, default=30,
                        help="pods replacing pods with the node full (0: none)")
    parser.add_argument("--out", type=Path, default=Path("BENCHMARKS.md"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("needs root: it sets a kernel knob, creates namespaces and links")
    socket = os.environ.get("VSWITCH_TEST_VPP_SOCKET", "")
    if not socket:
        parser.error("needs a running VPP: set VSWITCH_TEST_VPP_SOCKET to its API socket")
    if not os.path.exists(KNOB):
        parser.error(f"this kernel has no {KNOB}")
    before = machine.loadavg()
    rows = measure(args.rounds, args.live, args.measured, args.burst, socket, args.churn)
    command = "python -m benchmarks run rcu-add" + "".join(
        f" --{name} {value}" for name, value, default in (
            ("rounds", args.rounds, 2), ("live", args.live, 100),
            ("measured", args.measured, 30), ("burst", args.burst, 48),
            ("churn", args.churn, 30)) if value != default)
    write_section(args.out, section(rows, command, (before, machine.loadavg()), args.live),
                  BEGIN, END)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""Pod traffic across two nodes encrypted with WireGuard against the same in clear (issue #41):
the one-machine cluster (testbed/cluster.py: node namespaces on a fabric bridge, real etcd and
agents, pods through the real plugin), a pod on each node, and vpp_core's rows across nodes.

    python -m benchmarks run encryption [--quick] [--setup NAME ...] [--out BENCHMARKS.md]
                                        [--json FILE]

Setups (SETUPS): `clear` (the kernel dataplane's VXLAN mesh) and `wireguard` (`Encryption:
wireguard`; the kernel's WireGuard where it has the module, else wireguard-go: the section says
which ran); `vpp-clear` and `vpp-wireguard` the same with `Dataplane: vpp` (`VXLANOwner: linux`:
the node's VXLAN or WireGuard device carries what VPP sends to the other node); `vpp-own-clear`
and `vpp-own-wireguard` with `VXLANOwner: vpp` (VPP's own VXLAN tunnels, or VPP's own
WireGuard, its `wireguard` plugin). Each node's VPP on CPU 1, real VPPs from
VSWITCH_TEST_VPP_START (skipped, saying so, without). The pods'
sender and receiver, the agents and wireguard-go's threads are not pinned: they run where the
scheduler puts them, as on a node; every CPU's busy share during one more
TCP run gives Gbit/s per busy CPU (vpp_core.py). Rows: TCP one stream IPv4 and IPv6, TCP to a
stand-in ClusterIP whose backend is on the other node, RTT, UDP loss at 1 Gbit/s offered. The
pod MTU is each setup's default (1450 clear, 1420 encrypted).

Each encrypted setup's ratios are over the clear one of its dataplane; issue #41's target line
sets VPP's own WireGuard against the kernel dataplane's, per busy CPU.
Writes its own section of --out between markers (full mode's default is BENCHMARKS.md; quick
mode writes only where --out says). Traffic goes only to the namespaces it creates; everything
it starts is removed again, also on failure.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from benchmarks.core import machine
from benchmarks.core.sections import markers
from benchmarks.traffic.mesh import add_report_options, check_report_options, log, report
from benchmarks.traffic.mesh_report import Counts, SetupResult, cell, compare
from benchmarks.traffic.vpp_core import (
    ACROSS_ROWS,
    PER_CPU,
    VPP_KEYS,
    Setup,
    command_line,
    run_setup,
    setup_lines,
)
from testbed.cluster import Node

BEGIN, END = markers("encryption")
BASELINE = {"wireguard": "clear", "vpp-wireguard": "vpp-clear",  # encrypted -> its clear
            "vpp-own-wireguard": "vpp-own-clear"}
OWN = {**VPP_KEYS, "VXLANOwner": "vpp"}
IMPLEMENTATION = "WireGuard"
SETUPS = (
    Setup("clear", {"Dataplane": "kernel"}, pinned=False, nodes=2),
    Setup("wireguard", {"Dataplane": "kernel", "Encryption": "wireguard"}, pinned=False,
          nodes=2),
    Setup("vpp-clear", dict(VPP_KEYS), pinned=False, vpp="own", nodes=2),
    Setup("vpp-wireguard", {**VPP_KEYS, "Encryption": "wireguard"}, pinned=False, vpp="own",
          nodes=2),
    Setup("vpp-own-clear", dict(OWN), pinned=False, vpp="own", nodes=2),
    Setup("vpp-own-wireguard", {**OWN, "Encryption": "wireguard"}, pinned=False, vpp="own",
          nodes=2),
)


def which_wireguard(nodes: list[Node], result: SetupResult) -> None:
    """Records the WireGuard the first node's agent runs (kernel or wireguard-go)."""
    _, view = nodes[0].get("/v1/nodes")
    device = view.get("wireguard") if isinstance(view, dict) else None
    if device:
        result.config[IMPLEMENTATION] = device["implementation"]


def table(results: list[SetupResult]) -> list[str]:
    by_name = {r.name: r for r in results}
    head = ["row (across nodes)"]
    for r in results:
        head += [f"`{r.name}`"] + ([f"/ `{BASELINE[r.name]}`"] if r.name in BASELINE else [])
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in ACROSS_ROWS:
        if not any(r.values.get(row.key) or row.key in r.errors for r in results):
            continue
        cells = [row.label]
        for r in results:
            cells.append(cell(r, row))
            if r.name in BASELINE:
                cells.append(compare(r, by_name.get(BASELINE[r.name]), row))
        lines.append("| " + " | ".join(cells) + " |")
    per_cpu = ["Gbit/s per busy CPU (one more TCP IPv4 run)"]
    for r in results:
        value = r.config.get(PER_CPU)
        per_cpu.append("-" if value is None else f"{value:.2f}")
        if r.name in BASELINE:
            base = by_name.get(BASELINE[r.name])
            theirs = base.config.get(PER_CPU) if base else None
            per_cpu.append(f"{value / theirs:.2f} x" if value and theirs else "-")
    lines.append("| " + " | ".join(per_cpu) + " |")
    return lines


def target(results: list[SetupResult]) -> list[str]:
    """Issue #41's target: VPP's own WireGuard at least the kernel dataplane's, per busy CPU."""
    by_name = {r.name: r.config.get(PER_CPU) for r in results}
    vpp, kernel = by_name.get("vpp-own-wireguard"), by_name.get("wireguard")
    if not vpp or not kernel:
        return []
    verdict = "met" if vpp >= kernel else "not met"
    return [f"Target (issue #41): VPP's own WireGuard at least the kernel dataplane's encrypted "
            f"figure per busy CPU: {vpp:.2f} against {kernel:.2f} Gbit/s per busy CPU "
            f"({vpp / kernel:.2f}x): {verdict}.", ""]


def render(header: dict[str, Any], results: list[SetupResult]) -> str:
    counts: Counts = header["counts"]
    return "\n".join([
        BEGIN, "## Encryption between nodes: WireGuard against clear (issue #41)", "",
        command_line(header), "",
        "Two nodes of the one-machine cluster, pod a on the first node and pod b on the "
        "second; the pods unpinned, each node's VPP (the `vpp-` setups: `Dataplane: vpp`, "
        "`VXLANOwner: linux`; the `vpp-own-` setups `VXLANOwner: vpp`) on CPU 1. ClusterIP: "
        "kube-proxy's DNAT on a's node "
        "(testbed/service.py) to b. `wireguard`: every packet between the nodes through "
        "WireGuard (the implementation the agent found is named below; this kernel has no "
        "WireGuard module, so it is wireguard-go in userspace); `clear`: VXLAN. In the `vpp-` "
        "setups the node's device carries what VPP hands to Linux; in the `vpp-own-` ones VPP "
        "encapsulates itself (its VXLAN tunnels, or its `wireguard` plugin; the pods then "
        "compute their own checksums, docs/encryption.md). iperf3 one TCP "
        f"stream {counts.seconds} s, UDP 1400-byte datagrams at 1 Gbit/s {counts.seconds} s, "
        f"RTT the average of {counts.pings} pings 10 ms apart; each row {counts.runs} time(s), "
        "interleaved; cells: median (min-max); ratios over the clear setup of the same "
        "dataplane (UDP loss: the difference in points).", "",
        *setup_lines(results), "",
        *table(results), "",
        *target(results),
        f"{PER_CPU}: that run's Gbit/s over the sum of every CPU's busy share during it (each "
        "setup lists the shares). wireguard-go 0.0.20220316 (Debian 12) moves every packet "
        "through a TUN read or write and a UDP socket call of its own, with no segmentation "
        "offload: on these two CPUs that is its bound. On a machine whose kernel has WireGuard, "
        "the same command measures the kernel's (docs/encryption.md).", "",
        END, "",
    ])


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks run encryption",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 run of 1 s per row (a smoke run)")
    parser.add_argument("--setup", action="append", choices=[s.name for s in SETUPS],
                        help="measure only this setup (repeatable; default: all)")
    add_report_options(parser)
    args = parser.parse_args(argv)
    check_report_options(parser, args)
    if os.geteuid() != 0:
        parser.error("needs root: it creates network namespaces and starts agents")
    args.setup = [s for s in SETUPS if args.setup is None or s.name in args.setup]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)

    def measure_all(counts: Counts) -> list[SetupResult]:
        results = []
        for setup in args.setup:
            log(f"{setup.name}: starting")
            results.append(run_setup(setup, counts, 0, 1, observe=which_wireguard))
        return results

    log(f"machine: {machine.machine()['CPU']}")
    return report("encryption", argv, args, measure_all, render, (BEGIN, END))


if __name__ == "__main__":
    sys.exit(main())

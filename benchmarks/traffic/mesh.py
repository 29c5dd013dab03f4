"""Pod traffic on nodes with the node mesh on (issue #25), every setup side by side in one run:
two nodes of the one-machine cluster (testbed/cluster.py: node namespaces on a fabric bridge, a
real etcd, real agent processes with their node IPs, pods added through the real plugin).

    python -m benchmarks run mesh-traffic [--quick] [--setup NAME ...] [--out BENCHMARKS.md]
                                      [--json FILE] [--note TEXT]

Per setup (SETUPS: a name and the agent config keys that make it): TCP single-stream throughput
(iperf3) pod -> pod on the same node and across nodes, IPv4 and IPv6; pod -> ClusterIP (a DNAT
on the client's node, testbed/service.py) with the backend on the same node and on the other;
RTT (ping) and UDP loss at 1 Gbit/s offered, same node and across (benchmarks/
mesh_traffic_report.py lists the rows). A setup whose nodes do not start (an agent refusing a
config key it does not know) or whose mesh carries nothing is a failure row of the report, not
the end of the run. VPP setups start a real VPP per node namespace (testbed/vpp_nodes.py names
the environment variables) and are skipped with a note where those are unset.

Writes its own section of --out between its markers (full mode's default is BENCHMARKS.md, quick
mode writes only where --out says). Traffic goes only to the namespaces it
creates; every namespace, agent, etcd and VPP it starts is removed again, also on failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.core import machine
from benchmarks.core.harness import REPO, interrupt_on_signals
from benchmarks.core.netperf import IPERF_PORT, iperf, ping_rtt_ms
from benchmarks.core.sections import write_section
from benchmarks.traffic.mesh_report import (
    BEGIN,
    END,
    FULL,
    QUICK,
    ROWS,
    Counts,
    SetupResult,
    render,
)
from testbed.cluster import Cluster, Node, Pod, converged, wait_for
from testbed.podcheck import unreachable
from testbed.pods import sends_tso
from testbed.service import DnatService
from testbed.vpp_nodes import MISSING, REAL_VPP, VppNodes

# name -> the agent config keys of every node (beside the cluster's own: node name and IP, etcd,
# the dual-stack pod subnets); the first one is the baseline of the ratios
SETUPS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("kernel", {"Dataplane": "kernel"}),  # the kernel mesh: Linux's VXLAN device
    # Contiv's mesh, VPP's own VXLAN tunnels; the agent turns the pods' IPv4 TSO off (VPP 26.06
    # segments IPv4 GSO packets read by AF_PACKET wrongly)
    ("vpp-vxlan-in-vpp", {"Dataplane": "vpp", "VXLANOwner": "vpp"}),
    # VPP hands remote traffic to Linux over its interconnect, Linux's VXLAN device carries it
    # (the agent's default); pods keep TSO
    ("vpp-vxlan-in-linux", {"Dataplane": "vpp", "VXLANOwner": "linux"}),
    # the same with VPP reading the pods' rings on every turn of its loop (no wake-ups; a core
    # kept busy); only with --setup, not in the default run
    ("vpp-polling", {"Dataplane": "vpp", "VXLANOwner": "linux", "InterfaceRxMode": "polling"}),
    # the AF_PACKET rings before issue #25's UDP work: pods 20 + 10 frames, the interconnect
    # the same (docs/vpp.md, "Where UDP is lost through VPP"); only with --setup
    ("vpp-rings-20-10", {"Dataplane": "vpp", "VXLANOwner": "linux", "AfPacketRxFrames": 20,
                         "AfPacketTxFrames": 10, "AfPacketHostRxFrames": 20,
                         "AfPacketHostTxFrames": 10}),
    # the agent's defaults since then, spelt out: pods 14 + 16 (the same 1.93 MiB), the
    # interconnect 16 + 64
    ("vpp-rings-14-16", {"Dataplane": "vpp", "VXLANOwner": "linux", "AfPacketRxFrames": 14,
                         "AfPacketTxFrames": 16, "AfPacketHostRxFrames": 16,
                         "AfPacketHostTxFrames": 64}),
    # what rings of any size could do (33 MiB per pod: not a default)
    ("vpp-rings-256", {"Dataplane": "vpp", "VXLANOwner": "linux", "AfPacketRxFrames": 256,
                       "AfPacketTxFrames": 256}),
)
DEFAULT_SETUPS = ("kernel", "vpp-vxlan-in-vpp", "vpp-vxlan-in-linux")
DEFAULT_OUT = REPO / "BENCHMARKS.md"
SERVICE_IP = "10.96.25.1"
TSO_FEATURES = ("tx-tcp-segmentation", "tx-tcp6-segmentation")
KNOWN_KEYS = re.compile(r" \(known keys: [^)]*\)?")  # the agent's list of every key it knows
UDP_ARGS = ["-u", "-b", "1G", "-l", "1400"]


def log(message: str) -> None:
    print(f"[mesh-traffic {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- one setup -----------------------------------------------------------------------------

# row -> kind, client, server, address family (0 IPv4, 1 IPv6), through the Service
Plan = dict[str, tuple[str, Pod, Pod, int, bool]]


def plan(a: Pod, b: Pod, c: Pod) -> Plan:
    """What each row measures: a and b share node-1, c is on node-2."""
    return {
        "tcp-same-v4": ("tcp", a, b, 0, False), "tcp-same-v6": ("tcp", a, b, 1, False),
        "tcp-across-v4": ("tcp", a, c, 0, False), "tcp-across-v6": ("tcp", a, c, 1, False),
        "tcp-svc-same": ("tcp", a, b, 0, True), "tcp-svc-across": ("tcp", a, c, 0, True),
        "rtt-same": ("rtt", a, b, 0, False), "rtt-across": ("rtt", a, c, 0, False),
        "udp-same": ("udp", a, b, 0, False), "udp-across": ("udp", a, c, 0, False),
    }


def measure_once(kind: str, client: Pod, server: Pod, family: int, service: DnatService | None,
                 counts: Counts) -> tuple[float, int | None]:
    """One value of a row, and for TCP the sender's retransmits."""
    addr = server.ips[family]
    if kind == "rtt":
        return ping_rtt_ms(client.netns, addr, counts.pings), None
    if service is not None:
        service.point_to(addr, IPERF_PORT, IPERF_PORT)
    args = ["--connect-timeout", "5000", *(UDP_ARGS if kind == "udp" else [])]
    out: Any = iperf(client.netns, server.netns, addr, args, counts.seconds,
                      connect=service.ip if service is not None else "")
    if kind == "udp":
        return float(out["end"]["sum"]["lost_percent"]), None
    return (float(out["end"]["sum_received"]["bits_per_second"]) / 1e9,
            int(out["end"]["sum_sent"]["retransmits"]))


def measure(result: SetupResult, rows: Plan, service: DnatService, counts: Counts) -> None:
    """Every row of `rows` `counts.runs` times, interleaved (load that comes and goes hits all
    rows); a row that breaks is recorded and not tried again."""
    for run in range(counts.runs):
        for row in ROWS:
            if row.key not in rows or row.key in result.errors:
                continue
            kind, client, server, family, via = rows[row.key]
            try:
                value, retransmits = measure_once(kind, client, server, family,
                                                  service if via else None, counts)
            except (RuntimeError, ValueError, KeyError, subprocess.SubprocessError) as exc:
                result.errors[row.key] = short(exc)
                log(f"{result.name}: {row.key} failed: {short(exc)}")
                continue
            result.values.setdefault(row.key, []).append(value)
            result.loads.append(float(machine.loadavg().split()[0]))
            if retransmits is not None:
                result.retransmits.setdefault(row.key, []).append(retransmits)
            log(f"{result.name} run {run + 1}: {row.key} {value:.3f}")


def short(exc: BaseException) -> str:
    """One line of an exception: its first line, and from an agent's log (testbed.cluster puts
    it after the first line) the last line that names an error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    errors = [KNOWN_KEYS.sub("", line) for line in lines[1:]
              if any(w in line for w in ("ERROR", "Error", "error", "refus", "unknown key"))]
    text = lines[0].rstrip(":") + (f": {errors[-1]}" if errors else "")
    return text if len(text) <= 400 else text[:397] + "..."


def start_nodes(cluster: Cluster, vpps: VppNodes | None) -> tuple[Node, Node, Pod, Pod, Pod]:
    nodes = [vpps.add_node() if vpps is not None else cluster.add_node() for _ in range(2)]
    a, b, c = nodes[0].add_pod(), nodes[0].add_pod(), nodes[1].add_pod()
    try:
        wait_for(lambda: converged(nodes), 60, "the mesh of the two nodes")
        wait_for(lambda: unreachable([a], [b, c]) == [], 30, "a ping from a to b and c")
    except AssertionError as exc:
        raise RuntimeError(f"{exc}: left unanswered {unreachable([a], [b, c])}") from exc
    return nodes[0], nodes[1], a, b, c


def run_setup(name: str, config: dict[str, Any], counts: Counts) -> SetupResult:
    """One setup on a cluster of its own (its etcd, fabric, nodes and VPPs), all removed after."""
    result = SetupResult(name, dict(config), load_start=machine.loadavg())
    if lacks_vpp(result, config):
        return result
    with setup_cluster(result, config, "vmb") as (cluster, vpps):
        one, two, a, b, c = start_nodes(cluster, vpps)
        result.pod_tso = {f: sends_tso(f"/var/run/netns/{one.netns}", a.netns, f)
                          for f in TSO_FEATURES}
        log(f"{name}: mesh up, pods {a.ips} {b.ips} on {one.name}, {c.ips} on {two.name}")
        service = DnatService(SERVICE_IP, IPERF_PORT, netns=one.netns)
        try:
            measure(result, plan(a, b, c), service, counts)
        finally:
            service.remove()
    return result


def lacks_vpp(result: SetupResult, config: dict[str, Any]) -> bool:
    """True, the result skipped with why, for a VPP setup where no real VPPs can be started."""
    if config.get("Dataplane") == "vpp" and not REAL_VPP:
        result.status, result.note = "skipped", MISSING
        return True
    return False


@contextmanager
def setup_cluster(result: SetupResult, config: dict[str, Any], prefix: str
                  ) -> Iterator[tuple[Cluster, VppNodes | None]]:
    """The cluster of one setup with the agent keys `config` (this benchmark's and vpp_core's):
    its etcd and fabric, and for `Dataplane: vpp` a VppNodes whose nodes get a real VPP each
    (instances named after `prefix`). All of it is removed after, the pods deleted and the
    agents stopped while their VPPs still run. What breaks in the block fails
    the result with its reason instead of raising; the result's time and closing load are set."""
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix=f"traffic-{result.name}-"))
    try:
        with Cluster(workdir, dict(config)) as cluster:
            vpps = VppNodes(cluster, prefix=prefix) if config.get("Dataplane") == "vpp" else None
            try:
                yield cluster, vpps
            finally:
                cluster.close()
                if vpps is not None:
                    vpps.close()
    except (RuntimeError, AssertionError, OSError, subprocess.SubprocessError) as exc:
        result.status, result.note = "failed", short(exc)
        log(f"{result.name}: failed: {result.note}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        result.seconds = time.monotonic() - started
        result.load_end = machine.loadavg()


# --- the command ---------------------------------------------------------------------------

def add_report_options(parser: argparse.ArgumentParser) -> None:
    """--out and --json, as every traffic benchmark with a section takes them."""
    parser.add_argument("--out", type=Path,
                        help="markdown file whose section is replaced (default: BENCHMARKS.md; "
                        "quick mode: none)")
    parser.add_argument("--json", type=Path, help="also write every value here")


def check_report_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A full run writes BENCHMARKS.md by default; a quick run writes only where --out says,
    never there."""
    if args.out is None and not args.quick:
        args.out = DEFAULT_OUT
    if args.quick and args.out is not None and args.out.resolve() == DEFAULT_OUT.resolve():
        parser.error("quick-mode numbers must not replace BENCHMARKS.md; pick another --out")


def parse(argv: list[str] | None) -> argparse.Namespace:
    names = [name for name, _ in SETUPS]
    parser = argparse.ArgumentParser(prog="python -m benchmarks run mesh-traffic",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 run of 1 s per row (a smoke run)")
    parser.add_argument("--setup", action="append", choices=names,
                        help="measure only this setup (repeatable; default: "
                        f"{', '.join(DEFAULT_SETUPS)})")
    add_report_options(parser)
    parser.add_argument("--note", default="", help="a sentence for the section (the load's cause)")
    args = parser.parse_args(argv)
    check_report_options(parser, args)
    if os.geteuid() != 0:
        parser.error("needs root: it creates network namespaces and starts agents")
    args.setup = [n for n in names if n in (args.setup or DEFAULT_SETUPS)]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    configs = dict(SETUPS)

    def measure_all(counts: Counts) -> list[SetupResult]:
        results = []
        for name in args.setup:
            log(f"{name}: starting")
            results.append(run_setup(name, configs[name], counts))
        return results

    return report("mesh-traffic", argv, args, measure_all, render, (BEGIN, END),
                  note=args.note)


def report(name: str, argv: list[str] | None, args: argparse.Namespace,
           measure_all: Callable[[Counts], list[SetupResult]],
           render_section: Callable[[dict[str, Any], list[SetupResult]], str],
           markers: tuple[str, str], **extra: Any) -> int:
    """A traffic benchmark's run (this one's and vpp_core's): SIGTERM and SIGHUP unwind
    through every cleanup, the setups measured with the counts of --quick or not, the section
    printed, written between `markers` of --out and every value into --json; 1 when a
    setup or a row failed."""
    interrupt_on_signals()
    counts = QUICK if args.quick else FULL
    command = f"python -m benchmarks run {name} " + shlex.join(
        sys.argv[1:] if argv is None else argv)
    header: dict[str, Any] = {
        "command": command.strip(), "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_start": machine.loadavg(), "machine": machine.machine(),
        "commit": machine.git_commit(), "counts": counts, **extra}
    results = measure_all(counts)
    header["load_end"] = machine.loadavg()
    text = render_section(header, results)
    print(text)
    if args.out is not None:
        write_section(args.out, text, *markers)
        log(f"wrote the section of {args.out}")
    if args.json is not None:
        data = {**header, "counts": dataclasses.asdict(counts),
                "setups": [r.to_json() for r in results]}
        args.json.write_text(json.dumps(data, indent=1))
    return 0 if all(r.status != "failed" and not r.errors for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

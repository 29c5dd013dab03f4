"""Pod-to-pod traffic on one node, side by side: a bare veth pair (the floor), the kernel
dataplane and the VPP dataplane (each AF_PACKET variant asked for), in one run.

    python -m benchmarks run traffic [--quick] [--variant v2-14-16 ...]

Per setup: single-stream TCP throughput (iperf3), round-trip time (ping), UDP loss with 1 Gbit/s
offered (iperf3 -u), each repeated; for VPP also the ADD cost of the wiring (the driver's attach,
pods wired at the time) and kernel memory per pod: the AF_PACKET rings' size and the drop of
MemAvailable while pods are wired. Everything runs in namespaces this module creates, against
addresses inside them, and is removed again. VPP setups need VSWITCH_TEST_VPP_SOCKET. The
section's picture, traffic.svg, goes to docs/benchmarks/ beside --out.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import shlex
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from agent.dataplane.undo import UndoStack
from agent.dataplane.vpp import VppConfig, VppDataplane
from agent.dataplane.vpp.afpacket import RingOptions
from agent.linux import pod_netns
from agent.model.pod import PodNetwork
from benchmarks.core import plots
from benchmarks.core.harness import REPO
from benchmarks.core.netperf import iperf, ping_rtt_ms
from benchmarks.core.sections import markers, write_section
from benchmarks.core.targets import Target, table
from testbed.netns import entered, named_netns, run_in, unique
from testbed.pods import Subnets, started_driver, vpp_pod, wire

VPP_ENV = "VSWITCH_TEST_VPP_SOCKET"
VARIANTS = {  # name -> AF_PACKET options of a VPP setup (the first: the agent's defaults)
    "v2-14-16": RingOptions(),
    "v2-20-10": RingOptions(rx_frames=20, tx_frames=10),  # the defaults until issue #25's UDP work
    "v2-32": RingOptions(version=2, rx_frames=32, tx_frames=32),  # the defaults until #13
    "v2-64": RingOptions(version=2, rx_frames=64, tx_frames=64),
    # V3 as VPP lays it out (160 receive blocks), with frames that hold a GSO packet
    "v3-2": RingOptions(version=3, rx_frames=2, tx_frames=32),
    # Contiv's TCPChecksumOffloadDisabled instead: VPP leaves checksums alone, every pod switches
    # checksum offload, TSO and GSO off and computes them itself (2048-byte frames suffice)
    "pod-csum": RingOptions(version=2, frame_size=2048, rx_frames=256, tx_frames=256,
                            checksum_offload=False),
}
BEGIN, END = markers("traffic")
PLOT = "traffic"  # its picture: docs/benchmarks/traffic.svg beside --out
DEFAULT_VARIANTS = ("v2-14-16", "v2-32", "v2-64", "v3-2", "pod-csum")


@dataclass
class Figures:
    label: str
    tcp_gbps: list[float] = field(default_factory=list)
    rtt_ms: list[float] = field(default_factory=list)
    udp_loss_pct: list[float] = field(default_factory=list)
    add_ms: list[float] = field(default_factory=list)
    ring_mib: float | None = None
    mem_per_pod_mib: float | None = None
    note: str = ""  # why the setup was not measured
    failure: str = ""  # what broke while measuring it

    def median(self, name: str) -> float | None:
        values: list[float] = getattr(self, name)
        return statistics.median(values) if values else None


@dataclass(frozen=True)
class Counts:
    runs: int
    seconds: int
    pings: int
    memory_pods: int


FULL = Counts(runs=3, seconds=5, pings=100, memory_pods=10)
QUICK = Counts(runs=1, seconds=1, pings=10, memory_pods=2)


# --- one measurement -----------------------------------------------------------------------

def measure_pair(fig: Figures, a_ns: str, b_ns: str, b_addr: str, counts: Counts) -> None:
    """TCP, RTT and UDP loss from a to b, `counts.runs` times each."""
    for _ in range(counts.runs):
        tcp = iperf(a_ns, b_ns, b_addr, [], counts.seconds)
        fig.tcp_gbps.append(tcp["end"]["sum_received"]["bits_per_second"] / 1e9)  # type: ignore[index]
        udp = iperf(a_ns, b_ns, b_addr, ["-u", "-b", "1G", "-l", "1400"], counts.seconds)
        fig.udp_loss_pct.append(float(udp["end"]["sum"]["lost_percent"]))  # type: ignore[index]
        fig.rtt_ms.append(ping_rtt_ms(a_ns, b_addr, counts.pings))


def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


# --- the setups ----------------------------------------------------------------------------

def bare_veth(counts: Counts) -> Figures:
    fig = Figures("bare veth pair (floor)")
    with named_netns("tba") as a, named_netns("tbb") as b:
        run_in(a, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0",
               "netns", b.rsplit("/", 1)[1])
        for ns, addr in ((a, "10.249.0.1/24"), (b, "10.249.0.2/24")):
            run_in(ns, "ip", "addr", "add", addr, "dev", "eth0")
            run_in(ns, "ip", "link", "set", "eth0", "up")
            run_in(ns, "ip", "link", "set", "lo", "up")
        measure_pair(fig, a, b, "10.249.0.2", counts)
    return fig


def kernel(counts: Counts) -> Figures:
    fig = Figures("kernel dataplane")
    subnets = Subnets.pick()
    with named_netns("tbn") as node, entered(node), started_driver(node, subnets) as dp, \
            named_netns("tbp") as a, named_netns("tbp") as b:
        wire(dp, subnets.pod(a, 5, v6=False))
        wire(dp, subnets.pod(b, 6, v6=False))
        measure_pair(fig, a, b, str(subnets.v4[6]), counts)
    return fig


@contextmanager
def _vpp_driver(socket: str, rings: RingOptions) -> Iterator[VppDataplane]:
    suffix = unique("")[-4:]
    dp = VppDataplane(VppConfig(
        api_socket=socket, pod_vrf_id=1, afpacket=rings,
        pod_gateways=(ipaddress.ip_interface("10.248.1.1/24"),),
        vpp_host_ip=ipaddress.ip_interface("172.31.248.1/24"),
        host_linux_ip=ipaddress.ip_interface("172.31.248.2/24"),
        host_ifname=f"vsbt{suffix}h", host_vpp_ifname=f"vsbt{suffix}v",
    ))
    try:
        dp.start()
        yield dp
    finally:
        dp.teardown()
        dp.close()


def _vpp_pods(dp: VppDataplane, stack: ExitStack, first: int, n: int, fig: Figures
              ) -> list[PodNetwork]:
    pods = []
    for i in range(first, first + n):
        netns = stack.enter_context(named_netns("tbv"))
        p = vpp_pod(netns, f"10.248.1.{i}/32")
        started = time.perf_counter()
        wiring = dp.attach(p, UndoStack())
        fig.add_ms.append((time.perf_counter() - started) * 1000)
        stack.callback(dp.detach, p, wiring)
        pod_netns.configure(p, wiring.gateway_mac)
        if not dp.cfg.afpacket.checksum_offload:
            r = run_in(netns, "ethtool", "-K", p.key.ifname, "tx", "off", "tso", "off",
                       "gso", "off")
            if r.returncode != 0:
                raise RuntimeError(f"ethtool in the pod: {r.stderr.strip()}")
        pods.append(p)
    return pods


def vpp(counts: Counts, socket: str, variant: str) -> Figures:
    rings = VARIANTS[variant]
    fig = Figures(f"VPP dataplane, AF_PACKET {variant} (TPACKET_V{rings.version}, "
                  f"{rings.rx_frames}/{rings.tx_frames} frames of {rings.frame_size} B)")
    fig.ring_mib = rings.kernel_bytes / 2**20
    with _vpp_driver(socket, rings) as dp, ExitStack() as stack:
        before = _mem_available()
        pods = _vpp_pods(dp, stack, 10, counts.memory_pods, fig)
        fig.mem_per_pod_mib = (before - _mem_available()) / counts.memory_pods / 2**20
        try:
            measure_pair(fig, pods[0].netns, pods[1].netns, str(pods[1].addresses[0].ip),
                         counts)
        except RuntimeError as exc:  # a variant that cannot carry the traffic is a finding
            fig.failure = str(exc)
    return fig


def run(counts: Counts, variants: tuple[str, ...] = DEFAULT_VARIANTS) -> list[Figures]:
    figs = [bare_veth(counts), kernel(counts)]
    socket = os.environ.get(VPP_ENV, "")
    if not socket or not os.path.exists(socket):
        figs.append(Figures("VPP dataplane", note=f"not measured: {VPP_ENV} names no VPP socket"))
        return figs
    figs += [vpp(counts, socket, v) for v in variants]
    return figs


# --- report --------------------------------------------------------------------------------

def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render(figs: list[Figures], counts: Counts) -> list[str]:
    out = ["## Pod-to-pod traffic on one node (issue #18)", "",
           f"iperf3, one TCP stream for {counts.seconds} s; UDP 1400-byte datagrams at 1 Gbit/s "
           f"offered for {counts.seconds} s; ping RTT average of {counts.pings} pings 10 ms "
           f"apart; medians of {counts.runs} run(s). VPP rows: ADD = the driver's attach (median "
           "over the pods wired), ring = AF_PACKET ring size per interface, memory = drop of "
           "MemAvailable per wired pod.", "",
           "| setup | TCP Gbit/s | RTT ms | UDP loss % | ADD ms | ring MiB | memory MiB/pod |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for f in figs:
        if f.note:
            out.append(f"| {f.label} | {f.note} | | | | | |")
            continue
        out.append(f"| {f.label} | {_fmt(f.median('tcp_gbps'))} | {_fmt(f.median('rtt_ms'), 3)}"
                   f" | {_fmt(f.median('udp_loss_pct'))} | {_fmt(f.median('add_ms'), 1)} | "
                   f"{_fmt(f.ring_mib)} | {_fmt(f.mem_per_pod_mib)} |")
    failures = [f"- {f.label}: **failed** while measuring: {f.failure}" for f in figs
                if f.failure]
    return [*out, "", *failures, *([""] if failures else [])]


def plot(figs: Sequence[Figures], counts: Counts, directory: Path) -> Path:
    """The section's picture: per setup, the median TCP Gbit/s, RTT and UDP loss."""
    def panel(title: str, unit: str, name: str) -> plots.Bars:
        return plots.Bars(title, unit, {f"median of {counts.runs} run(s)": {
            f.label.split(" (")[0]: value for f in figs
            if (value := f.median(name)) is not None}})

    missing = [f"{f.label}: {f.note}" for f in figs if f.note]
    return plots.bars(directory / f"{PLOT}.svg",
                      "Pod-to-pod traffic on one node" + "".join(f"\n({m})" for m in missing),
                      [panel("TCP, one stream", "Gbit/s", "tcp_gbps"),
                       panel("RTT", "ms", "rtt_ms"),
                       panel("UDP loss, 1 Gbit/s offered", "% lost", "udp_loss_pct")])


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks run traffic")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    parser.add_argument("--out", type=Path, default=REPO / "BENCHMARKS.md")
    args = parser.parse_args(argv)
    counts = QUICK if args.quick else FULL
    command = shlex.join(["python", "-m", "benchmarks", "run", "traffic",
                          *(sys.argv[1:] if argv is None else argv)])
    figs = run(counts, tuple(args.variant or DEFAULT_VARIANTS))
    text = "\n".join([BEGIN, *render(figs, counts),
                      plots.embed(PLOT, "TCP Gbit/s, RTT and UDP loss per setup"), "",
                      f"Command: `{command}`. Targets (issue #18), for the VPP setup with the "
                      "agent's default AF_PACKET options:", "", *table(traffic_targets(figs)),
                      END])
    print(text)
    plot(figs, counts, plots.plot_dir(args.out))
    write_section(args.out, text + "\n", BEGIN, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())

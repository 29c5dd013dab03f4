"""Where UDP datagrams are lost on their way through VPP (issue #25): every counter a datagram
passes, read before and after one iperf3 UDP run, and what changed, place by place.

    python -m benchmarks run udp-loss [--setup NAME ...] [--runs N] [--seconds S] [--rate 1G]
                                  [--json FILE] [--affinity C[,S]] [--vpp-cpus LIST]
                                  [--vpp-sched fifo:N|nice:N]

The cluster is benchmarks/traffic/mesh.py's (two nodes, pods a and b on node-1, c on node-2, one
real VPP per node namespace for VPP setups; SETUPS are its setups). Per run and path (a -> b on
the same node, a -> c across) it prints what iperf3 sent and lost, then every counter that moved,
in the order a datagram meets them:

- the sending pod: `Udp` of /proc/net/snmp (OutDatagrams, SndbufErrors), its eth0;
- each node: every link of the node namespace (`ip -s link`: packets, dropped), and of its VPP
  the AF_PACKET sockets' own statistics (PACKET_STATISTICS: frames the kernel offered the
  receive ring and those it dropped because the ring was full; read from VPP's socket through
  pidfd_getfd, which resets them: VPP itself never reads them), `show interface` (rx, tx,
  drops, tx-error, rx-miss), `show errors` (which graph node dropped what: `tx ring
  overrun`, `tx frame not ready`, ...), `show runtime` (datagrams per call of the input and
  transmit nodes) and its main thread's schedstat and context switches (time on a CPU, time
  runnable but waiting for one, sleeps);
- the receiving pod: its eth0, `Udp` (InDatagrams, RcvbufErrors, InErrors);
- the machine: /proc/net/softnet_stat (backlog drops, squeezes; all CPUs, all namespaces).

Read-only apart from that reset; traffic stays in the namespaces the cluster creates, and
everything it starts is removed again. Three experiments change who gets a CPU, never the agent:
`--affinity` pins iperf3 (its -A), `--vpp-cpus` widens the node VPPs' CPU affinity, and
`--vpp-sched` runs their main threads under SCHED_FIFO (what VPP's `cpu { scheduler-policy }`
sets) or another nice value. docs/vpp.md ("Where UDP is lost through VPP") has what it found.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shutil
import socket
import struct
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.core.netperf import iperf
from benchmarks.traffic.mesh import SETUPS, log, start_nodes
from testbed.cluster import Cluster, Node, Pod
from testbed.netns import run_in
from testbed.vpp import VppProbe
from testbed.vpp_nodes import MISSING, REAL_VPP, VppNodes

Counters = dict[str, int]  # "place: counter" -> value
SYS_PIDFD_GETFD = 438  # x86_64 and the other architectures of the generic syscall table
SOL_PACKET, PACKET_STATISTICS = 263, 6
UDP_FIELDS = ("OutDatagrams", "SndbufErrors", "InDatagrams", "RcvbufErrors", "InErrors",
              "NoPorts")
LINK_FIELDS = ("packets", "dropped")
SHOW_ERRORS = re.compile(r"^\s*(\d+)\s+(\S+)\s+(.+?)(?:\s+(?:error|info|warn|unknown))?\s*$")
COUNTER = re.compile(r"([a-z][a-z0-9 -]*?)\s+(\d+)\s*$")
RUNTIME = re.compile(r"^(\S+)\s+.*?\s(\d+)\s+(\d+)\s+\d+\s+\S+\s+\S+\s*$")


# --- parsers (pure) ------------------------------------------------------------------------

def parse_snmp_udp(text: str) -> Counters:
    """The `Udp:` counters of /proc/net/snmp (a header line, then a value line)."""
    lines = [line.split() for line in text.splitlines() if line.startswith("Udp:")]
    if len(lines) < 2:
        return {}
    values = dict(zip(lines[0][1:], lines[1][1:], strict=False))
    return {f: int(values[f]) for f in UDP_FIELDS if f in values}


def parse_links(data: list[dict[str, Any]]) -> Counters:
    """`ip -s -j link show`: rx/tx packets and drops per link."""
    out: Counters = {}
    for link in data:
        stats = link.get("stats64") or link.get("stats") or {}
        for way in ("rx", "tx"):
            for field in LINK_FIELDS:
                out[f"{link['ifname']} {way} {field}"] = int(stats.get(way, {}).get(field, 0))
    return out


def parse_show_interface(text: str) -> Counters:
    """VPP's `show interface`: every counter of every interface (`host-vswp0 tx-error`)."""
    out: Counters = {}
    name = ""
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("Name"):
            continue
        rest = line
        if not line[0].isspace():
            fields = line.split()
            name, rest = fields[0], " ".join(fields[4:])  # name, index, state, MTU, counter
        match = COUNTER.search(rest.strip())
        if name and match:
            out[f"{name} {match.group(1)}"] = int(match.group(2))
    return out


def parse_show_errors(text: str) -> Counters:
    """VPP's `show errors`: count per graph node and reason (`host-vswp1-tx: tx ring overrun`)."""
    out: Counters = {}
    for line in text.splitlines():
        match = SHOW_ERRORS.match(line)
        if match:
            key = f"{match.group(2)}: {match.group(3)}"
            out[key] = out.get(key, 0) + int(match.group(1))
    return out


def parse_show_runtime(text: str) -> Counters:
    """VPP's `show runtime`: calls and vectors (packets) of the AF_PACKET input node and of
    every interface's transmit node (`host-vswp1-tx`): vectors per call is the batch VPP
    takes from a receive ring per wake-up, and hands a transmit ring per call."""
    out: Counters = {}
    for line in text.splitlines():
        match = RUNTIME.match(line)
        if match and (match.group(1) == "af-packet-input" or match.group(1).endswith("-tx")):
            out[f"{match.group(1)} calls"] = out.get(f"{match.group(1)} calls", 0) + int(
                match.group(2))
            out[f"{match.group(1)} vectors"] = out.get(f"{match.group(1)} vectors", 0) + int(
                match.group(3))
    return out


def parse_softnet(text: str) -> Counters:
    """/proc/net/softnet_stat summed over CPUs: column 2 backlog drops, 3 time squeezes."""
    rows = [[int(v, 16) for v in line.split()] for line in text.splitlines() if line.strip()]
    return {"backlog dropped": sum(r[1] for r in rows), "time squeeze": sum(r[2] for r in rows)}


def parse_process(schedstat: str, status: str) -> Counters:
    """A thread's time on a CPU and time runnable but waiting for one (ms, /proc/PID/
    schedstat), and its context switches: how often VPP slept and was woken (voluntary) or
    was pushed off its core (involuntary)."""
    run_ns, wait_ns = (int(v) for v in schedstat.split()[:2])
    out = {"ms on cpu": run_ns // 10**6, "ms waiting for a cpu": wait_ns // 10**6}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
            out[key.replace("_", " ")] = int(value)
    return out


def delta(before: Counters, after: Counters) -> Counters:
    """What moved (keys only in `after` count from 0)."""
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


# --- readers -------------------------------------------------------------------------------

def pod_counters(pod: Pod) -> Counters:
    out = {f"Udp {k}": v for k, v in parse_snmp_udp(run_in(pod.netns, "cat",
                                                           "/proc/net/snmp").stdout).items()}
    links = json.loads(run_in(pod.netns, "ip", "-s", "-j", "link", "show", "eth0").stdout)
    return out | parse_links(links)


def node_links(node: Node) -> Counters:
    return parse_links(json.loads(run_in(f"/var/run/netns/{node.netns}", "ip", "-s", "-j",
                                         "link", "show").stdout))


@contextmanager
def borrowed_fds(pid: int) -> Iterator[Iterator[socket.socket]]:
    """Copies of every socket process `pid` holds (pidfd_getfd), closed again afterwards;
    closing a copy leaves the process's own descriptor alone."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    taken: list[socket.socket] = []

    def sockets() -> Iterator[socket.socket]:
        for entry in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{entry}").startswith("socket:"):
                    continue
            except OSError:
                continue
            fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, int(entry), 0)
            if fd < 0:
                continue
            sock = socket.socket(fileno=fd)
            taken.append(sock)
            yield sock

    try:
        yield sockets()
    finally:
        for sock in taken:
            sock.close()
        os.close(pidfd)


def ring_counters(pid: int) -> Counters:
    """Per AF_PACKET socket of VPP (named by its Linux interface): frames the kernel offered
    its receive ring since the last read, and those dropped because the ring was full."""
    out: Counters = {}
    with borrowed_fds(pid) as sockets:
        for sock in sockets:
            if sock.family != socket.AF_PACKET:
                continue
            ifname = sock.getsockname()[0]
            # struct tpacket_stats (V1, V2) or tpacket_stats_v3, which begins with it
            stats = sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 12)
            packets, drops = struct.unpack("II", stats[:8])
            # the kernel counts the dropped frames among the offered ones
            out[f"socket {ifname}: offered"] = out.get(f"socket {ifname}: offered", 0) + packets
            out[f"socket {ifname}: ring full"] = out.get(f"socket {ifname}: ring full", 0) + drops
    return out


class NodeReader:
    """One node's counters: its links, and its VPP's rings, interfaces and errors."""

    def __init__(self, node: Node, vpps: VppNodes | None) -> None:
        self.node = node
        self.probe = (VppProbe(vpps.sockets[node.name], vpps.api_dirs[node.name])
                      if vpps is not None else None)
        self.pid = self.probe.pid() if self.probe is not None else 0

    def read(self) -> dict[str, Counters]:
        places = {f"{self.node.name} links": node_links(self.node)}
        if self.probe is not None:
            places[f"{self.node.name} VPP process"] = parse_process(
                Path(f"/proc/{self.pid}/task/{self.pid}/schedstat").read_text(),
                Path(f"/proc/{self.pid}/status").read_text())
            places[f"{self.node.name} VPP rings"] = ring_counters(self.pid)
            places[f"{self.node.name} VPP interfaces"] = parse_show_interface(
                self.probe.cli("show interface"))
            places[f"{self.node.name} VPP errors"] = parse_show_errors(
                self.probe.cli("show errors"))
            places[f"{self.node.name} VPP runtime"] = parse_show_runtime(
                self.probe.cli("show runtime"))
        return places

    def close(self) -> None:
        if self.probe is not None:
            self.probe.close()


def snapshot(client: Pod, server: Pod, readers: list[NodeReader]) -> dict[str, Counters]:
    places = {f"pod {client.name} (client)": pod_counters(client)}
    for reader in readers:
        places |= reader.read()
    places[f"pod {server.name} (server)"] = pod_counters(server)
    places["machine softnet"] = parse_softnet(Path("/proc/net/softnet_stat").read_text())
    return places


# --- one run -------------------------------------------------------------------------------

def one_run(path: str, client: Pod, server: Pod, readers: list[NodeReader],
            args: argparse.Namespace) -> dict[str, Any]:
    for reader in readers:  # the rings' statistics count from their last read
        if reader.probe is not None:
            ring_counters(reader.pid)
    before = snapshot(client, server, readers)
    pinned = ["-A", args.affinity] if args.affinity else []
    out: Any = iperf(client.netns, server.netns, server.ips[0],
                     ["-u", "-b", args.rate, "-l", "1400", *pinned], args.seconds)
    after = snapshot(client, server, readers)
    moved = {place: delta(before.get(place, {}), counters) for place, counters in after.items()}
    sent, lost = int(out["end"]["sum"]["packets"]), int(out["end"]["sum"]["lost_packets"])
    return {"path": path, "sent": sent, "lost": lost,
            "moved": {p: c for p, c in moved.items() if c}}


def render(result: dict[str, Any], wanted: Callable[[str], bool]) -> str:
    lines = [f"{result['path']}: iperf3 sent {result['sent']}, lost {result['lost']} "
             f"({100 * result['lost'] / max(result['sent'], 1):.1f} %)"]
    for place, counters in result["moved"].items():
        shown = {k: v for k, v in counters.items() if wanted(k)}
        if shown:
            lines.append(f"  {place}:")
            lines += [f"    {k:<48} {v:>10}" for k, v in sorted(shown.items())]
    return "\n".join(lines)


def interesting(key: str) -> bool:
    """Drops and packet counts; not bytes."""
    return "bytes" not in key and not key.endswith(("ip4", "ip6"))


def allow(pid: int, cpus: set[int]) -> None:
    """Lets every thread of process `pid` run on `cpus` (an experiment: VPP pins its main
    thread to its `main-core`)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)


def schedule(pid: int, how: str) -> None:
    """VPP's main thread (its pid) under `fifo:PRIORITY` (what VPP's own `cpu {
    scheduler-policy fifo scheduler-priority N }` sets) or `nice:N` (an experiment)."""
    policy, _, value = how.partition(":")
    if policy == "fifo":
        os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(int(value)))
    elif policy == "nice":
        os.setpriority(os.PRIO_PROCESS, pid, int(value))
    else:
        raise ValueError(f"--vpp-sched {how}: fifo:N or nice:N")


def run_setup(name: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    config = dict(SETUPS)[name]
    vpp = config.get("Dataplane") == "vpp"
    if vpp and not REAL_VPP:
        log(f"{name}: skipped: {MISSING}")
        return []
    workdir = Path(tempfile.mkdtemp(prefix=f"udp-loss-{name}-"))
    results: list[dict[str, Any]] = []
    try:
        with Cluster(workdir, dict(config)) as cluster:
            vpps = VppNodes(cluster, prefix="vul") if vpp else None
            readers: list[NodeReader] = []
            try:
                one, two, a, b, c = start_nodes(cluster, vpps)
                readers = [NodeReader(one, vpps), NodeReader(two, vpps)]
                for reader in readers:
                    if args.vpp_cpus:
                        allow(reader.pid, {int(c) for c in args.vpp_cpus.split(",")})
                    if args.vpp_sched:
                        schedule(reader.pid, args.vpp_sched)
                for run in range(args.runs):
                    for path, server, nodes in (("same node", b, readers[:1]),
                                                ("across nodes", c, readers)):
                        result = one_run(path, a, server, nodes, args)
                        result |= {"setup": name, "run": run + 1}
                        results.append(result)
                        print(f"[{name} run {run + 1}] {render(result, interesting)}\n",
                              flush=True)
            finally:
                for reader in readers:
                    reader.close()
                cluster.close()
                if vpps is not None:
                    vpps.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks run udp-loss",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--setup", action="append", choices=[n for n, _ in SETUPS])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rate", default="1G", help="iperf3 -b (offered rate)")
    parser.add_argument("--json", type=Path, help="also write every delta here")
    parser.add_argument("--affinity", default="",
                        help="iperf3 -A: the client's CPU, or CLIENT,SERVER (an experiment)")
    parser.add_argument("--vpp-cpus", default="",
                        help="CPUs every node VPP may run on, e.g. 0,1 (an experiment: VPP "
                        "pins its main thread to its main-core)")
    parser.add_argument("--vpp-sched", default="",
                        help="fifo:PRIORITY or nice:N for every node VPP's main thread (an "
                        "experiment)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("needs root: it creates network namespaces and starts agents")
    results: list[dict[str, Any]] = []
    for name in args.setup or ["vpp-vxlan-in-linux"]:
        results += run_setup(name, args)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

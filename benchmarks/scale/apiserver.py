"""What N agents' reads cost the API server (issue #39, item 5): N copies of the agent's watch
side (agent.kube.KubeState, the shipped ClusterRole's user, as each node's agent runs it) in front
of one real kube-apiserver that holds a big KWOK-made cluster (benchmarks.core.kwok), for each N
asked. As root or not; nothing but loopback.

    VSWITCH_TEST_KUBE_APISERVER=$KUBE_BIN/kube-apiserver python -m benchmarks run api-load \\
        [--nodes 500] [--pods 15000] [--policies 1000] [--services 1000] [--agents 1,10,50]
        [--processes 4] [--rate 20] [--seconds 60] [--with-services] [--json FILE] [--out FILE]

Per N: the watchers start at once in --processes worker processes (a KubeState each: Pods,
Namespaces, NetworkPolicies and Nodes listed, then watched; with --with-services also Services
and EndpointSlices, as `ServiceTranslation: vpp` has it), all through one counting TCP proxy, so
the bytes the API server sends them are counted; then --rate pod label flips a second happen in
the cluster for --seconds (the benchmark's own writes go to the API server directly). Measured:
the time until every watcher has listed, the API server's CPU seconds and the bytes it sent for
those lists; its CPU (a share of one core) and bytes a second while the events go out; the
worker processes' RSS over the watchers (an upper bound: each worker is a fork of the benchmark).
Writes its own section of --out, with its picture. Asserts no speed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shlex
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

from agent.kube.reflector import KubeState
from benchmarks.core import machine
from benchmarks.core.harness import REPO, interrupt_on_signals, join_or_kill
from benchmarks.core.kwok import USER, Client, Size, churn, cpu_seconds, kube_api, populate, rss_mib
from benchmarks.core.plots import Lines, embed, lines, plot_dir
from benchmarks.core.sections import markers, publish
from testbed.tcpproxy import TcpProxy

BEGIN, END = markers("api-load")
SYNC_TIMEOUT = 600.0


def log(message: str) -> None:
    print(f"[api-load {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _watchers(count: int, kubeconfig: str, services: bool, ready: Any, stop: Any) -> None:
    """A worker process: `count` watch sides, its RSS reported once all have listed."""
    states = [KubeState(kubeconfig, services=services) for _ in range(count)]
    for state in states:
        state.start()
    synced = all(state.wait_synced(SYNC_TIMEOUT) for state in states)
    ready.put((synced, rss_mib(os.getpid())))
    stop.wait()
    for state in states:
        state.stop()


def measure(api: Any, client: Client, pods: Sequence[Any], agents: int,
            args: argparse.Namespace) -> dict[str, float]:
    ctx = multiprocessing.get_context("fork")
    ready, stop = ctx.Queue(), ctx.Event()
    assert api.proc is not None
    api_pid = api.proc.pid
    with closing(TcpProxy(api.port)) as proxy:
        kubeconfig = str(api.kubeconfig(USER, proxy.port))
        shares = [agents // args.processes + (i < agents % args.processes)
                  for i in range(min(args.processes, agents))]
        cpu0, sent0, t0 = cpu_seconds(api_pid), proxy.down, time.monotonic()
        workers = [ctx.Process(target=_watchers, args=(n, kubeconfig, args.with_services,
                                                       ready, stop)) for n in shares]
        for worker in workers:
            worker.start()
        try:
            reports = [ready.get(timeout=SYNC_TIMEOUT + 60) for _ in workers]
            if not all(synced for synced, _ in reports):
                raise RuntimeError(f"{agents} watchers: some did not list within "
                                   f"{SYNC_TIMEOUT:.0f} s")
            sync_s = time.monotonic() - t0
            cpu1, sent1 = cpu_seconds(api_pid), proxy.down
            time.sleep(2.0)  # the lists' tail (progress notifications) out of the churn's count
            cpu2, sent2, t2 = cpu_seconds(api_pid), proxy.down, time.monotonic()
            events = churn(client, list(pods), ("version", "v1", "v2"), args.rate, args.seconds)
            wall = time.monotonic() - t2
            time.sleep(1.0)  # the last events reach the watchers
            cpu3, sent3 = cpu_seconds(api_pid), proxy.down
        finally:
            stop.set()
            join_or_kill(workers)
    return {"agents": agents, "sync_s": sync_s, "sync_api_cpu_s": cpu1 - cpu0,
            "sync_sent_mib": (sent1 - sent0) / 2**20, "events": events,
            "events_per_s": events / wall, "churn_api_cpu_share": (cpu3 - cpu2) / (wall + 1.0),
            "churn_sent_kib_per_s": (sent3 - sent2) / 1024 / (wall + 1.0),
            "watcher_rss_mib": sum(rss for _, rss in reports) / agents}


def run(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               "load_start": machine.loadavg(), "machine": machine.machine()}
    with ExitStack() as stack:
        api = stack.enter_context(kube_api())
        client = Client(api)
        size = Size(args.nodes, args.pods, args.policies, args.services)
        log(f"populating the API: {size}")
        figures["api"], pods = populate(client, size, args.workers)
        log(f"populated in {figures['api']['seconds']:.0f} s")
        rows = []
        for agents in args.agents:
            log(f"{agents} watcher(s)")
            rows.append(measure(api, client, pods, agents, args))
            log(f"{rows[-1]}")
        figures["rows"] = rows
    figures["load_end"] = machine.loadavg()
    return figures


def _per(row: dict[str, float], key: str) -> float:
    return row[key] / row["agents"]


def section(figures: dict[str, Any], command: str, picture: str) -> str:
    api, rows = figures["api"], figures["rows"]
    first = rows[0]
    out = [BEGIN, "## What N agents' watches cost the API server (issue #39)", "",
           f"Command: `{command}` (as root, VSWITCH_TEST_KUBE_APISERVER naming kube-apiserver "
           f"v1.28). Started {figures['started']}; load {figures['load_start']} at the start, "
           f"{figures['load_end']} at the end; {figures['machine'].get('CPU', '')}, "
           f"{figures['machine'].get('cores (os.cpu_count)', '?')} cores. The cluster: "
           f"{api['nodes']} Nodes, {api['pods']} Pods in {api['namespaces']} namespaces, "
           f"{api['policies']} NetworkPolicies, {api['services']} Services with their "
           "EndpointSlices (benchmarks.core.kwok). Each watcher is the agent's watch side "
           "(agent.kube.KubeState) as the shipped role's user; bytes are what the API server "
           "sent them, counted by a proxy; CPU is the kube-apiserver process's.", "",
           "| watchers | all listed in s | API CPU s for the lists | MiB sent for the lists | "
           "events/s | API CPU (cores) under events | KiB/s sent under events | "
           "KiB/s per watcher | per watcher, x the first row's | watcher RSS MiB |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        per = _per(row, "churn_sent_kib_per_s")
        base = _per(first, "churn_sent_kib_per_s")
        out.append(f"| {row['agents']:.0f} | {row['sync_s']:.1f} | {row['sync_api_cpu_s']:.1f} "
                   f"| {row['sync_sent_mib']:.1f} | {row['events_per_s']:.1f} | "
                   f"{row['churn_api_cpu_share']:.2f} | {row['churn_sent_kib_per_s']:.0f} | "
                   f"{per:.1f} | {per / base if base else float('nan'):.2f} | "
                   f"{row['watcher_rss_mib']:.0f} |")
    last = rows[-1]
    grow = last["churn_sent_kib_per_s"] / first["churn_sent_kib_per_s"] \
        if first["churn_sent_kib_per_s"] else float("nan")
    out += ["", f"From {first['agents']:.0f} to {last['agents']:.0f} watchers the bytes the API "
            f"server sends under the same events grow {grow:.1f}x and the bytes for the lists "
            f"{last['sync_sent_mib'] / first['sync_sent_mib']:.1f}x: every watcher gets every "
            "pod of the cluster, whether or not a pod of its node needs it.", "", picture, END]
    return "\n".join(out) + "\n"


def plot(figures: dict[str, Any], path: Path) -> Path:
    rows = figures["rows"]
    xs = [r["agents"] for r in rows]
    return lines(path, "The API server's cost per number of watchers", [
        Lines("API server CPU (cores) under events", "cores",
              {"API server": (xs, [r["churn_api_cpu_share"] for r in rows])}),
        Lines("sent under events (KiB/s)", "KiB/s",
              {"API server": (xs, [r["churn_sent_kib_per_s"] for r in rows])}),
        Lines("sent for the lists (MiB)", "MiB",
              {"API server": (xs, [r["sync_sent_mib"] for r in rows])}),
    ], "watchers")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks run api-load",
                                     description=(__doc__ or "").splitlines()[0])
    for name, default in (("nodes", 500), ("pods", 15000), ("policies", 1000),
                          ("services", 1000), ("processes", 4), ("workers", 8)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--agents", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1, 10, 50], help="watcher counts, comma-separated")
    parser.add_argument("--rate", type=float, default=20.0, help="pod events a second")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds of events")
    parser.add_argument("--with-services", action="store_true",
                        help="watch Services and EndpointSlices too")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--out", type=Path, default=REPO / "BENCHMARKS.md")
    args = parser.parse_args(argv)
    interrupt_on_signals()
    figures = run(args)
    picture = plot(figures, plot_dir(args.out) / "api-load.svg")
    command = shlex.join(["python", "-m", "benchmarks", "run", "api-load",
                          *(sys.argv[1:] if argv is None else argv)])
    publish(figures, section(figures, command, embed(picture.stem, "API server cost per "
                                                     "number of watchers")),
            args.out, BEGIN, END, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

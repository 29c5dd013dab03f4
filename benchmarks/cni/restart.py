"""Figures 4 and 7: agent restarts (reconcile) and agent memory, with 0 and with P live pods.

One node config (one node name, etcd prefix, CNI socket) is used throughout, so every restart is
the same node coming back:
1. `restarts` times: start the agent with no pods, time exec -> /readiness 200, read VmRSS.
2. Start it again and ADD P pods (real namespaces, through libcni, 16 runtimes); read VmRSS.
3. `restarts` times: SIGTERM, start again, time exec -> /readiness 200; read the agent's own
   /v1/reconcile report (`seconds`, `live` must be P) and VmRSS.
4. DEL every pod, stop the agent.
For the memory floor, VmRSS of a bare interpreter that only imports the agent's modules.

Alone (figure 4 only, e.g. while working on reconcile; needs root):

    python3 -m benchmarks.cni.restart [--pods P] [--restarts R] [--profile]
"""

from __future__ import annotations

import argparse
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from benchmarks.cni.verbs import add_pods, delete_pods
from benchmarks.core.harness import (
    REPO,
    CniNetwork,
    Namespaces,
    Pod,
    PodSubnets,
    bench_agent_config,
    launch_agent,
    ours_network,
    plugin_bin_dir,
    remove_agent_links,
    vm_rss_bytes,
    wait_ready,
)
from testbed.agent import AgentHandle
from testbed.etcd import EtcdServer
from testbed.libcni import DEFAULT_BUILD_DIR, build_driver

IMPORT_ONLY = (
    "import agent.app, agent.dataplane.kernel, agent.main\n"
    "for line in open('/proc/self/status'):\n"
    "    if line.startswith('VmRSS:'): print(int(line.split()[1]) * 1024)\n"
)


@dataclass
class RestartFigures:
    pods: int
    startup_empty_s: list[float] = field(default_factory=list)
    reconcile_empty_s: list[float] = field(default_factory=list)
    rss_empty: list[int] = field(default_factory=list)
    rss_after_adds: list[int] = field(default_factory=list)
    startup_loaded_s: list[float] = field(default_factory=list)
    reconcile_loaded_s: list[float] = field(default_factory=list)
    rss_loaded: list[int] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)
    import_rss: int = 0
    netns_open_ms: list[float] = field(default_factory=list)
    # one more restart under cProfile: (function, calls, cumulative s) under reconcile()
    profile: list[tuple[str, int, float]] = field(default_factory=list)
    profiled_reconcile_s: float = 0.0


def _restart(tmp: Path, config: dict[str, Any], name: str,
             profile_to: Path | None = None) -> tuple[AgentHandle, float]:
    start = time.monotonic()
    agent = launch_agent(tmp, config, name, profile_to)
    try:
        ready = wait_ready(agent)
    except BaseException:
        agent.stop()
        raise
    return agent, ready - start


def _report(agent: AgentHandle) -> dict[str, Any]:
    status, body = agent.get("/v1/reconcile")
    if status != 200 or not isinstance(body, dict):
        raise RuntimeError(f"GET /v1/reconcile answered {status}: {body}")
    return body


def _profiled_restart(tmp: Path, config: dict[str, Any],
                      ) -> tuple[AgentHandle, float, list[tuple[str, int, float]]]:
    """Restarts the agent under cProfile (main thread: reconcile runs there, before serving),
    stops it so that the profile is written, starts it again plainly; returns that agent, the
    profiled reconcile's seconds and the heaviest functions below reconcile()."""
    path = tmp / "reconcile.prof"
    agent, _ = _restart(tmp, config, "profiled", profile_to=path)
    seconds = float(_report(agent)["seconds"])
    agent.stop()
    agent, _ = _restart(tmp, config, "after-profile")
    return agent, seconds, heaviest_under(path, "reconcile")


def heaviest_under(path: Path, root: str, count: int = 12) -> list[tuple[str, int, float]]:
    """Functions by cumulative time that the `root` function's time includes (a callee
    anywhere below it: cumulative time < root's), for agent, pyroute2 and etcd code."""
    stats = pstats.Stats(str(path))
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    roots = [v[3] for (file, _, func), v in table.items()
             if func == root and file.endswith("agent/lifecycle/reconcile.py")]
    if not roots:
        return []
    limit = max(roots)
    rows = []
    for (file, line, func), (_, calls, _, cumulative, _) in table.items():
        if cumulative >= limit or func == "<module>" or not any(
                k in file for k in ("agent/", "pyroute2", "pyetcd")):
            continue
        where = file.split("site-packages/")[-1].split(f"{REPO}/")[-1]
        rows.append((f"{func} ({where}:{line})", int(calls), float(cumulative)))
    return sorted(rows, key=lambda r: -r[2])[:count]


def netns_open_ms(pods: list[Pod]) -> list[float]:
    """What reading one pod namespace over netlink costs from Python (pyroute2 forks a helper
    that setns()es for every IPRoute(netns=...)), as a per-pod check does: open, list, close."""
    out = []
    for pod in pods:
        start = time.perf_counter()
        with IPRoute(netns=str(pod.netns), flags=0) as ipr:
            ipr.get_links()
        out.append((time.perf_counter() - start) * 1000)
    return out


def import_rss() -> int:
    proc = subprocess.run([sys.executable, "-c", IMPORT_ONLY], cwd=REPO, capture_output=True,
                          text=True, check=True)
    return int(proc.stdout.strip())


def run(tmp: Path, config: dict[str, Any], network: Callable[[AgentHandle], CniNetwork],
        namespaces: Namespaces, pods: int, restarts: int, profile: bool = True
        ) -> RestartFigures:
    out = RestartFigures(pods=pods, import_rss=import_rss())
    agent: AgentHandle | None = None
    added: list[Pod] = []
    try:
        for i in range(restarts):
            agent, seconds = _restart(tmp, config, f"empty-{i}")
            out.startup_empty_s.append(seconds)
            out.reconcile_empty_s.append(float(_report(agent)["seconds"]))
            out.rss_empty.append(vm_rss_bytes(agent.process.pid))
            agent.stop()
            agent = None
        agent, _ = _restart(tmp, config, "loading")
        net = network(agent)
        added = add_pods(net, namespaces, pods)
        out.rss_after_adds.append(vm_rss_bytes(agent.process.pid))
        out.netns_open_ms = netns_open_ms(added)
        for i in range(restarts):
            agent.stop()
            agent = None
            agent, seconds = _restart(tmp, config, f"loaded-{i}")
            report = _report(agent)
            if report["live"] != pods or report["errors"]:
                raise RuntimeError(f"reconcile found {report['live']} of {pods} pods live: "
                                   f"{report}")
            out.startup_loaded_s.append(seconds)
            out.reconcile_loaded_s.append(float(report["seconds"]))
            out.rss_loaded.append(vm_rss_bytes(agent.process.pid))
            out.reports.append(report)
        if profile:
            agent.stop()
            agent = None
            agent, out.profiled_reconcile_s, out.profile = _profiled_restart(tmp, config)
        delete_pods(net, namespaces, added)
        added = []
        return out
    finally:
        for pod in added:  # a failure half-way: the namespaces take the veths with them
            namespaces.remove(pod.netns)
        if agent is not None:
            agent.stop()
        remove_agent_links(config)


def main(argv: list[str] | None = None) -> int:
    """Figure 4 on its own: one etcd, one agent, P pods, R restarts; prints the medians."""
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.cni.restart",
                                     description="agent restart with live pods (figure 4 only)")
    parser.add_argument("--pods", type=int, default=250, help="live pods (default 250)")
    parser.add_argument("--restarts", type=int, default=3, help="timed restarts (default 3)")
    parser.add_argument("--profile", action="store_true",
                        help="one more restart under cProfile; print the heaviest functions")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("needs root: it creates network namespaces and links")
    tmp = Path(tempfile.mkdtemp(prefix=f"vcni-restart-{os.getpid()}-"))
    namespaces = Namespaces()
    try:
        with EtcdServer() as etcd:
            driver = build_driver(DEFAULT_BUILD_DIR)
            bin_dir = plugin_bin_dir(tmp)
            host_ns = namespaces.create()
            config = bench_agent_config(tmp, etcd.endpoints, PodSubnets().take())

            def network(agent: AgentHandle) -> CniNetwork:
                return ours_network(driver, bin_dir, tmp, host_ns, agent, "vswitch-cni-restart")

            res = run(tmp, config, network, namespaces, args.pods, args.restarts, args.profile)
    finally:
        namespaces.close()
        shutil.rmtree(tmp, ignore_errors=True)
    seconds = res.reconcile_loaded_s
    print(f"reconcile, {args.pods} pods: median {statistics.median(seconds):.3f} s "
          f"(min {min(seconds):.3f}, max {max(seconds):.3f}, n {len(seconds)})")
    ready = statistics.median(res.startup_loaded_s)
    print(f"exec to ready, {args.pods} pods: median {ready:.3f} s")
    print(f"reconcile, 0 pods: median {statistics.median(res.reconcile_empty_s):.3f} s")
    if args.profile:
        print(f"profiled reconcile: {res.profiled_reconcile_s:.3f} s")
        for name, calls, cumulative in res.profile:
            print(f"  {cumulative:8.3f} s {calls:7d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

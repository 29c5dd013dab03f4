"""Figures 4 and 7: agent restarts (reconcile) and agent memory, with 0 and with P live pods.

One node config (one node name, etcd prefix, CNI socket) is used throughout, so every restart is
the same node coming back:
1. `restarts` times: start the agent with no pods, time exec -> /readiness 200, read VmRSS.
2. Start it again and ADD P pods (real namespaces, through libcni, 16 runtimes); read VmRSS.
3. `restarts` times: SIGTERM, start again, time exec -> /readiness 200; read the agent's own
   /v1/reconcile report (`seconds`, `live` must be P) and VmRSS.
4. DEL every pod, stop the agent.
For the memory floor, VmRSS of a bare interpreter that only imports the agent's modules.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from benchmarks.cni_bench import add_pods, delete_pods
from benchmarks.harness import (
    REPO,
    CniNetwork,
    Namespaces,
    Pod,
    launch_agent,
    remove_agent_links,
    vm_rss_bytes,
    wait_ready,
)
from tests.helpers.agent import AgentHandle

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


def _restart(tmp: Path, config: dict[str, Any], name: str) -> tuple[AgentHandle, float]:
    start = time.monotonic()
    agent = launch_agent(tmp, config, name)
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
        namespaces: Namespaces, pods: int, restarts: int) -> RestartFigures:
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
        delete_pods(net, namespaces, added)
        added = []
        return out
    finally:
        for pod in added:  # a failure half-way: the namespaces take the veths with them
            namespaces.remove(pod.netns)
        if agent is not None:
            agent.stop()
        remove_agent_links(config)

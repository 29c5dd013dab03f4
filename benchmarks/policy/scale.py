"""NetworkPolicy at cluster scale: one real agent in front of a real kube-apiserver that holds a
big cluster made the way KWOK makes one (objects created through the API, no kubelets behind
them), and what the agent costs there. Kernel dataplane; as root; everything it makes is removed
at the end, also on failure.

    VSWITCH_TEST_KUBE_APISERVER=$KUBE_BIN/kube-apiserver python -m benchmarks run policy-scale \\
        [--nodes 5000] [--pods 150000] [--policies 10000] [--services 10000] [--local 100]
        [--rate 100] [--churn 300] [--changes 20] [--measured 20] [--workers 8]
        [--json FILE] [--out BENCHMARKS.md]

The cluster: benchmarks.core.kwok's, of --nodes Nodes, --pods Pods, --policies
NetworkPolicies and --services Services with their EndpointSlices. Then the
real agent (KubeConfig as the shipped role's user, through a counting TCP proxy) on a node of
its own, and the benchmark as that node's kubelet with --local real pods (the real plugin's
ADD), under the standing policies of benchmarks.policy.enforce plus one whose peers are team1's
web pods.

Measured: the agent's time from start to ready and its first NetworkPolicy apply, its RSS,
bytes it read from the API; its CPU while --rate pod events a second happen elsewhere in the
cluster for --churn seconds, in two phases: events that change no set or rule of its pods
(a `version` label flipped: no selector tells v1 from v2) and events that move pods in and out
of a set its pods name (team1 pods' `tier` flipped between web and api); during the second,
the change-to-enforcement latency of --changes policy creations and deletions (as
benchmarks.policy.enforce); at the end --measured ADDs and DELs (handler and `policy` phase).
Writes its own section of --out. Asserts no speed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

from benchmarks.core import machine
from benchmarks.core.harness import interrupt_on_signals
from benchmarks.core.kwok import (
    USER,
    Client,
    Size,
    churn,
    cpu_seconds,
    kube_api,
    populate,
    rss_mib,
)
from benchmarks.core.sections import publish
from benchmarks.policy.enforce import (
    STANDING,
    WORKER,
    add_latency,
    enforcement,
    node_agent,
    node_pods,
    wait_verdict,
)
from benchmarks.policy.kube import Kubelet, create_policy
from benchmarks.policy.scale_report import BEGIN, END, section
from testbed.agent import AgentHandle
from testbed.etcd import EtcdServer
from testbed.tcpproxy import TcpProxy

WEB_FROM_TEAM1 = {"podSelector": {"matchLabels": WORKER}, "ingress": [{"from": [{
    "namespaceSelector": {"matchLabels": {"team": "team1"}},
    "podSelector": {"matchLabels": {"tier": "web"}}}]}]}


def log(message: str) -> None:
    print(f"[policy-scale {time.strftime('%H:%M:%S')}] {message}", flush=True)


def gauge(agent: AgentHandle, name: str) -> float:
    """A gauge or counter of the agent's /metrics (0 when absent)."""
    _, body = agent.get("/metrics")
    for line in str(body).splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def phase(agent_pid: int, proxy: TcpProxy, fn: Callable[[], int]) -> dict[str, float]:
    cpu0, bytes0, t0 = cpu_seconds(agent_pid), proxy.down, time.monotonic()
    events = fn()
    wall = time.monotonic() - t0
    return {"events": events, "seconds": wall, "events_per_s": events / wall,
            "cpu_share": (cpu_seconds(agent_pid) - cpu0) / wall,
            "read_bytes_per_s": (proxy.down - bytes0) / wall, "rss_mib": rss_mib(agent_pid)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               "load_start": machine.loadavg(), "machine": machine.machine(),
                               "args": {k: v for k, v in vars(args).items() if k != "out"}}
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vcni-polscale-")))
        etcd, api = stack.enter_context(EtcdServer()), stack.enter_context(kube_api())
        client = Client(api)
        log(f"populating the API: {args.nodes} nodes, {args.pods} pods, {args.policies} "
            f"policies, {args.services} services")
        figures["api"], pods = populate(client, Size(args.nodes, args.pods, args.policies,
                                                      args.services), args.workers)
        log(f"populated in {figures['api']['seconds']:.0f} s")
        for name, spec in {**STANDING, "workers-web": WEB_FROM_TEAM1}.items():
            create_policy(api, name, spec)
        proxy = stack.enter_context(closing(TcpProxy(api.port)))
        started = time.monotonic()
        agent = stack.enter_context(node_agent(tmp, etcd.endpoints, "kernel", api,
                                               kubeconfig=api.kubeconfig(USER, proxy.port)))
        pid = agent.process.pid
        figures["ready_s"] = time.monotonic() - started
        while gauge(agent, "vswitch_cni_policy_applies") < 1:
            time.sleep(0.05)
        figures["first_apply_s"] = time.monotonic() - started
        figures["rss_ready_mib"], figures["read_bytes_ready"] = rss_mib(pid), proxy.down
        kubelet = stack.enter_context(closing(Kubelet(api, agent)))
        client_pod, server_pod, _ = stack.enter_context(node_pods(kubelet, args.local - 2))
        wait_verdict(client_pod, server_pod, True)
        figures["rss_local_mib"] = rss_mib(pid)
        elsewhere = [p for p in pods if p[0].startswith("team") and not p[0].startswith("team1-")]
        team1 = [p for p in pods if p[0].startswith("team1-")]
        log(f"churn, events that touch none of the node's sets: {args.rate}/s, {args.churn} s")
        figures["quiet"] = phase(pid, proxy, lambda: churn(
            client, elsewhere, ("version", "v1", "v2"), args.rate, args.churn))
        log(f"churn, team1 pods in and out of a set the node's pods name, {args.changes} "
            "policy changes meanwhile")
        result: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: result.update(
            enforcement(api, client_pod, server_pod, args.changes)))
        thread.start()
        figures["peers"] = phase(pid, proxy, lambda: churn(
            client, team1, ("tier", "web", "api"), args.rate, args.churn))
        thread.join()
        figures["enforce"] = result
        log(f"{args.measured} ADDs with {args.local} live pods")
        figures["add_on"] = add_latency(kubelet, agent, [len(kubelet.pods)], args.measured)
        figures["rss_end_mib"] = rss_mib(pid)
    figures["load_end"] = machine.loadavg()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    for name, default in (("nodes", 5000), ("pods", 150000), ("policies", 10000),
                          ("services", 10000), ("local", 100), ("changes", 20),
                          ("measured", 20), ("workers", 8)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--rate", type=float, default=100.0, help="pod events a second")
    parser.add_argument("--churn", type=float, default=300.0, help="seconds per churn phase")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--out", type=Path, default=Path("BENCHMARKS.md"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("needs root: it creates network namespaces and links")
    interrupt_on_signals()
    figures = run(args)
    publish(figures, section(figures, "python -m benchmarks run policy-scale "
                             + shlex.join(sys.argv[1:])), args.out, BEGIN, END, args.json)


if __name__ == "__main__":
    main()

"""NetworkPolicy at cluster scale: one real agent in front of a real kube-apiserver that holds a
big cluster made the way KWOK makes one (objects created through the API, no kubelets behind
them), and what the agent costs there. Kernel dataplane; as root; everything it makes is removed
at the end, also on failure.

    VSWITCH_TEST_KUBE_APISERVER=$KUBE_BIN/kube-apiserver python -m benchmarks run policy-scale \\
        [--nodes 5000] [--pods 150000] [--policies 10000] [--services 10000] [--local 100]
        [--rate 100] [--churn 300] [--changes 20] [--measured 20] [--workers 8]
        [--json FILE] [--out BENCHMARKS.md]

The cluster: --nodes Nodes (InternalIP 192.168.x.y), --pods Pods in namespaces of 150 (labels
app, tier, version with a few values each; named container ports), spread over the nodes at
random with podIPs from each node's /24 of 10.0.0.0/8; --policies NetworkPolicies
(benchmarks.policy.compiler's mix: default deny, namespace-wide allows, podSelector,
namespaceSelector, both, ipBlock with except, named and numeric ports, egress); --services
Services (ClusterIP, a selector) each with an EndpointSlice of up to 10 of its pods. Then the
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
import http.client
import json
import os
import random
import shlex
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

from benchmarks.core import machine
from benchmarks.core.harness import interrupt_on_signals
from benchmarks.core.sections import publish
from benchmarks.policy.compiler import _policy
from benchmarks.policy.enforce import (
    STANDING,
    WORKER,
    add_latency,
    enforcement,
    node_agent,
    node_pods,
    wait_verdict,
)
from benchmarks.policy.kube import POLICIES, USER, Kubelet, create_policy, kube_api
from benchmarks.policy.scale_report import BEGIN, END, section
from testbed.agent import AgentHandle
from testbed.etcd import EtcdServer
from testbed.kube import ADMIN, KubeApiServer
from testbed.tcpproxy import TcpProxy

PER_NAMESPACE = 150
WEB_FROM_TEAM1 = {"podSelector": {"matchLabels": WORKER}, "ingress": [{"from": [{
    "namespaceSelector": {"matchLabels": {"team": "team1"}},
    "podSelector": {"matchLabels": {"tier": "web"}}}]}]}
TIERS = ("web", "api", "db", "cache")


def log(message: str) -> None:
    print(f"[policy-scale {time.strftime('%H:%M:%S')}] {message}", flush=True)


class Client:
    """Keep-alive HTTPS to the API server, one connection per thread (a new TLS handshake
    per request would make populating 300,000 objects take an hour)."""

    def __init__(self, api: KubeApiServer) -> None:
        self.api, self._local = api, threading.local()

    def call(self, method: str, path: str, body: object,
             content_type: str = "application/json") -> None:
        for attempt in range(3):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = http.client.HTTPSConnection(
                    "127.0.0.1", self.api.port, context=self.api.tls, timeout=30)
            try:
                conn.request(method, path, json.dumps(body), headers={
                    "Authorization": f"Bearer {self.api.tokens[ADMIN]}",
                    "Content-Type": content_type})
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
                continue
            if resp.status >= 300 and resp.status != 409:
                raise RuntimeError(f"{method} {path}: {resp.status} {data[:300]!r}")
            return


def node_ip(i: int) -> str:
    return f"192.168.{i // 250}.{1 + i % 250}"


def populate(client: Client, args: argparse.Namespace) -> tuple[dict[str, Any], list[Any]]:
    """The cluster (the module's docstring); its pods as (namespace, name, labels)."""
    rng = random.Random(11)
    started, pool = time.monotonic(), ThreadPoolExecutor(args.workers)
    n_ns = max(1, args.pods // PER_NAMESPACE)

    def each(fn: Callable[[Any], None], items: list[Any]) -> None:
        list(pool.map(fn, items))

    each(lambda i: client.call("POST", "/api/v1/nodes", {
        "metadata": {"name": f"node-{i}"}}), list(range(args.nodes)))
    each(lambda i: client.call("PATCH", f"/api/v1/nodes/node-{i}/status", {"status": {
        "addresses": [{"type": "InternalIP", "address": node_ip(i)}]}},
        "application/merge-patch+json"), list(range(args.nodes)))
    namespaces = [f"team{n % 10}-{n:03d}" for n in range(n_ns)]
    each(lambda n: client.call("POST", "/api/v1/namespaces", {"metadata": {
        "name": namespaces[n], "labels": {"team": f"team{n % 10}",
                                          "env": ("prod", "staging", "dev")[n % 3]}}}),
         list(range(n_ns)))
    used = [0] * args.nodes
    pods = []
    for i in range(args.pods):
        node = rng.randrange(args.nodes)
        used[node] += 1
        app = (i % PER_NAMESPACE) // 15
        labels = {"app": f"app{app}", "tier": TIERS[app % 4], "version": f"v{1 + i % 2}"}
        pods.append((namespaces[i // PER_NAMESPACE % n_ns], f"app{app}-{i}", labels, node,
                     f"10.{node // 256}.{node % 256}.{1 + used[node]}"))

    def pod(p: tuple[str, str, dict[str, str], int, str]) -> None:
        ns, name, labels, node, ip = p
        ports = [{"name": "http", "containerPort": 8080}, {"name": "metrics",
                                                            "containerPort": 9090}]
        client.call("POST", f"/api/v1/namespaces/{ns}/pods", {
            "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": f"node-{node}",
                     "containers": [{"name": "c", "image": "none", "ports": ports}]}})
        client.call("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status", {"status": {
            "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}},
            "application/merge-patch+json")
    each(pod, pods)
    each(lambda p: client.call("POST", POLICIES.format(ns=namespaces[p % n_ns]),
                               _policy(namespaces[p % n_ns], p // n_ns, n_ns, rng)),
         list(range(args.policies)))

    def service(s: int) -> None:
        ns, app = namespaces[s % n_ns], f"app{s // n_ns % 10}"
        client.call("POST", f"/api/v1/namespaces/{ns}/services", {
            "metadata": {"name": f"svc-{s}"}, "spec": {"selector": {"app": app},
                                                       "ports": [{"port": 80}]}})
        backends = [p for p in pods[(s % n_ns) * PER_NAMESPACE:][:PER_NAMESPACE]
                    if p[2]["app"] == app][:10]
        client.call("POST", f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", {
            "metadata": {"name": f"svc-{s}-1", "labels": {
                "kubernetes.io/service-name": f"svc-{s}"}},
            "addressType": "IPv4", "ports": [{"port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [p[4]]} for p in backends]})
    each(service, list(range(args.services)))
    pool.shutdown()
    return {"nodes": args.nodes, "pods": len(pods), "namespaces": n_ns,
            "policies": args.policies, "services": args.services,
            "seconds": time.monotonic() - started}, pods


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def churn(client: Client, targets: list[Any], flip: tuple[str, str, str], rate: float,
          seconds: float) -> int:
    """`rate` label flips a second (label, one value, the other) over `targets`, paced."""
    key, one, other = flip
    done, start = 0, time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        while time.monotonic() - start < seconds:
            ns, name, labels = targets[done % len(targets)][:3]
            labels[key] = other if labels[key] == one else one
            pool.submit(client.call, "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}",
                        {"metadata": {"labels": {key: labels[key]}}},
                        "application/merge-patch+json")
            done += 1
            time.sleep(max(0.0, start + done / rate - time.monotonic()))
    return done


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
        figures["api"], pods = populate(client, args)
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

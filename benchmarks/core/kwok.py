"""A big cluster in a real kube-apiserver, made the way KWOK makes one: objects created through
the API with no kubelets behind them. Used by the API-server scale runs (benchmarks/scale) and
NetworkPolicy at cluster scale (benchmarks/policy).

- `kube_api()`: an API server (VSWITCH_TEST_KUBE_APISERVER names the binary) on an etcd of its
  own, the agent's shipped ClusterRole bound to USER;
- `populate(client, Size(...))`: Nodes (InternalIP 192.168.x.y), Pods in namespaces of 150
  (labels app, tier, version with a few values each; named container ports) spread over the
  nodes at random with podIPs from each node's /24 of 10.0.0.0/8, `synthetic_policy`'s mix of
  NetworkPolicies (default deny, namespace-wide allows, podSelector, namespaceSelector, both,
  ipBlock with except, named and numeric ports, egress), Services each with an EndpointSlice of
  up to 10 of its pods;
- `churn`: label flips at a paced rate; `cpu_seconds` and `rss_mib` of a process.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.core.harness import REPO
from testbed.etcd import EtcdServer
from testbed.kube import ADMIN, ENV, KubeApiServer, binary

USER = "vswitch-agent"
NS = "bench"  # a namespace for the benchmark's own objects
RBAC = REPO / "k8s" / "base" / "rbac.yaml"
POLICIES = "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"
PER_NAMESPACE = 150
TIERS = ("web", "api", "db", "cache")
Obj = dict[str, Any]


@dataclass(frozen=True)
class Size:
    nodes: int
    pods: int
    policies: int
    services: int


@contextmanager
def kube_api() -> Iterator[KubeApiServer]:
    """An API server on an etcd of its own, the agent's role bound to USER."""
    path = binary()
    if path is None:
        raise RuntimeError(f"{ENV} is unset: name a kube-apiserver binary "
                           "(e.g. $KUBE_BIN/kube-apiserver)")
    with EtcdServer(extra=("--experimental-watch-progress-notify-interval=1s",)) as etcd, \
            KubeApiServer(path, etcd.endpoints, users=(USER,)) as api:
        docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
        role = next(d for d in docs if d["kind"] == "ClusterRole")
        api.must("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
        api.must("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "metadata": {"name": f"bench-{USER}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role["metadata"]["name"]},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": USER}]})
        api.must("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
        yield api


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


def synthetic_policy(ns: str, index: int, n_ns: int, rng: random.Random) -> Obj:
    app = {"matchLabels": {"app": f"app{index % 10}"}}
    other = {"podSelector": {"matchLabels": {"app": f"app{rng.randrange(10)}"}}}
    kind = index % 8
    spec: Obj
    if index == 0:
        spec = {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}  # default deny
    elif index == 1:
        spec = {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}],
                "egress": [{"to": [{"namespaceSelector": {"matchLabels": {
                    "kubernetes.io/metadata.name": "kube-system"}}, "podSelector": {
                    "matchLabels": {"k8s-app": "kube-dns"}}}],
                    "ports": [{"protocol": "UDP", "port": 53}, {"port": "dns-tcp"}]}]}
    elif kind in (2, 3):
        spec = {"podSelector": app, "ingress": [{"from": [other], "ports": [{"port": "http"}]}]}
    elif kind == 4:
        spec = {"podSelector": app, "ingress": [{"from": [{
            "namespaceSelector": {"matchLabels": {"team": f"team{rng.randrange(10)}"}},
            "podSelector": {"matchLabels": {"tier": "web"}}}],
            "ports": [{"port": "http"}, {"port": "grpc"}]}]}
    elif kind == 5:
        spec = {"podSelector": {"matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["api", "db"]}]},
            "ingress": [{"from": [{"podSelector": {"matchExpressions": [
                {"key": "tier", "operator": "NotIn", "values": ["db"]},
                {"key": "version", "operator": "Exists"}]}}],
                "ports": [{"port": 5000, "endPort": 5100}, {"protocol": "UDP", "port": 5353}]}]}
    elif kind == 6:
        spec = {"podSelector": app, "egress": [{"to": [{"ipBlock": {
            "cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "169.254.169.254/32"]}}],
            "ports": [{"port": 443}]}, {"to": [other], "ports": [{"port": "http"}]}]}
    else:
        spec = {"podSelector": app, "ingress": [{"from": [{"namespaceSelector": {
            "matchLabels": {"env": "prod"}}}], "ports": [{"port": "metrics"}]}]}
    return {"metadata": {"namespace": ns, "name": f"policy-{index}"}, "spec": spec}


def populate(client: Client, size: Size, workers: int = 8) -> tuple[dict[str, Any], list[Any]]:
    """The cluster (the module's docstring); its pods as (namespace, name, labels, node, IP)."""
    rng = random.Random(11)
    started, pool = time.monotonic(), ThreadPoolExecutor(workers)
    n_ns = max(1, size.pods // PER_NAMESPACE)

    def each(fn: Callable[[Any], None], items: list[Any]) -> None:
        list(pool.map(fn, items))

    each(lambda i: client.call("POST", "/api/v1/nodes", {
        "metadata": {"name": f"node-{i}"}}), list(range(size.nodes)))
    each(lambda i: client.call("PATCH", f"/api/v1/nodes/node-{i}/status", {"status": {
        "addresses": [{"type": "InternalIP", "address": node_ip(i)}]}},
        "application/merge-patch+json"), list(range(size.nodes)))
    namespaces = [f"team{n % 10}-{n:03d}" for n in range(n_ns)]
    each(lambda n: client.call("POST", "/api/v1/namespaces", {"metadata": {
        "name": namespaces[n], "labels": {"team": f"team{n % 10}",
                                          "env": ("prod", "staging", "dev")[n % 3]}}}),
         list(range(n_ns)))
    used = [0] * size.nodes
    pods = []
    for i in range(size.pods):
        node = rng.randrange(size.nodes)
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
                               synthetic_policy(namespaces[p % n_ns], p // n_ns, n_ns, rng)),
         list(range(size.policies)))

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
    each(service, list(range(size.services)))
    pool.shutdown()
    return {"nodes": size.nodes, "pods": len(pods), "namespaces": n_ns,
            "policies": size.policies, "services": size.services,
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

"""Pod traffic and pod start-up on the real cluster of the k8s tier, both dataplanes side by side.

    python -m tests.k8s_tier.bench [--runs 3] [--seconds 5] [--replicas 10] [--write]

With the tier's environment (tests/k8s_tier/conftest.py: VSWITCH_TEST_KUBECONFIG, the nodes'
namespaces, VSWITCH_TEST_VPP_SOCKET for the VPP run) it deploys the project as the tier does,
once per dataplane, with the tier's workload, and measures:
- TCP, one stream (iperf3 `-t SECONDS`, RUNS runs): pod -> pod on the same node and across
  nodes; pod -> ClusterIP (kube-proxy's DNAT) with the backend on the same node and across;
- RTT (ping, 50 echoes): pod -> pod, same node and across;
- UDP loss with 1 Gbit/s offered (iperf3 -u), pod -> pod on the same node;
- a Deployment of REPLICAS pods (agnhost `pause`) on the first node: from apply to all ready,
  and the mean ADD the node's agent answered meanwhile (`vswitch_cni_request_seconds`).
iperf3 and ping are the node's binaries, run in the pods' network namespaces (entered from here,
as the tier's long-running traffic is). The clients are pods of the workload on the first node;
the servers run in the namespaces of the `hairpin-<i>` backends (one pod per node), reached
through Services of this module's (`bench-iperf-<i>`, on benchmarks.traffic.one_node's iperf3 port,
whose measuring code this module uses). `--write` puts the table in BENCHMARKS.md's own
section; without it the table is printed only.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.linux import rcu
from benchmarks.core.netperf import IPERF_PORT, iperf, ping_rtt_ms
from benchmarks.core.sections import write_section
from tests.k8s_tier import deploy
from tests.k8s_tier.conftest import (
    ETCD_IMAGE,
    KUBECONFIG,
    KUBECTL,
    NODE2_NETNS,
    NODE_NETNS,
    POD_IMAGE,
    VPP_SOCKET,
)
from tests.k8s_tier.kube import Doc, Kube
from tests.k8s_tier.tier import AGENT_REST_PORT, Node, Tier, deployed, find_nodes

ROOT = Path(__file__).resolve().parents[2]
BEGIN = "<!-- k8s-bench: begin (written by python -m tests.k8s_tier.bench --write) -->"
END = "<!-- k8s-bench: end -->"
SCALE = "bench-scale"


@dataclass
class Rows:
    dataplane: str
    figures: dict[str, list[float]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def add(self, name: str, value: float) -> None:
        self.figures.setdefault(name, []).append(value)


def _iperf_json(client: str, server: str, ip: str, seconds: int, *args: str,
                connect: str = "") -> Any:
    """iperf3's JSON from pod namespace `client` to a server bound to `ip` in `server`
    (benchmarks.traffic.one_node's, on its port; `connect`: a Service address DNATed to it)."""
    return iperf(client, server, ip, list(args), seconds, connect=connect)


def _gbps(iperf: Any) -> float:
    return float(iperf["end"]["sum_received"]["bits_per_second"]) / 1e9


def _add_sum_count(node: Node) -> tuple[float, float]:
    text = node.get(node.ip, AGENT_REST_PORT, "/metrics")
    values = {}
    for key in ("sum", "count"):
        match = re.search(rf'^vswitch_cni_request_seconds_{key}{{verb="ADD"}} ([\d.e+-]+)$', text,
                          re.M)
        values[key] = float(match.group(1)) if match else 0.0
    return values["sum"], values["count"]


def _iperf_services(kube: Kube, nodes: list[Node]) -> dict[str, str]:
    """Per node name, the ClusterIP of a Service on port IPERF_PORT over its hairpin pod."""
    docs = [{"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": f"bench-iperf-{n.index}", "namespace": deploy.NAMESPACE},
             "spec": {"selector": {"app": deploy.APP, deploy.HAIRPIN_LABEL: str(n.index)},
                      "ports": [{"port": IPERF_PORT, "targetPort": IPERF_PORT}]}}
            for n in nodes]
    kube.apply(docs)
    return {n.name: kube.get("service", f"bench-iperf-{n.index}",
                             deploy.NAMESPACE)["spec"]["clusterIP"] for n in nodes}


def _scale_deployment(node: str, replicas: int) -> Doc:
    labels = {"app": SCALE}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": SCALE, "namespace": deploy.NAMESPACE},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "terminationGracePeriodSeconds": 1,
                     "nodeSelector": {"kubernetes.io/hostname": node},
                     "containers": [{"name": "pause", "image": POD_IMAGE, "args": ["pause"]}]}}},
    }


def measure(tier: Tier, rows: Rows, runs: int, seconds: int, replicas: int) -> None:
    first, *others = tier.nodes
    backend = {n.name: tier.hairpin[n.name][1] for n in tier.nodes}
    client = next(p for p in tier.on(first) if p != backend[first.name])
    client_ns = tier.pod_netns(client)
    services = _iperf_services(tier.kube, tier.nodes)
    targets = [("same node", first)] + [("across nodes", n) for n in others[:1]]
    for where, node in targets:
        server = backend[node.name]
        server_ns, ip = tier.pod_netns(server), tier.pods[server].ip
        for _ in range(runs):
            tcp = _iperf_json(client_ns, server_ns, ip, seconds)
            rows.add(f"TCP pod -> pod, {where} (Gbit/s)", _gbps(tcp))
            tcp = _iperf_json(client_ns, server_ns, ip, seconds, connect=services[node.name])
            rows.add(f"TCP pod -> ClusterIP, backend {where} (Gbit/s)", _gbps(tcp))
        if where == "same node":
            for _ in range(runs):
                udp = _iperf_json(client_ns, server_ns, ip, seconds, "-u", "-b", "1G")
                rows.add(f"UDP loss at 1 Gbit/s, pod -> pod, {where} (%)",
                         float(udp["end"]["sum"]["lost_percent"]))
        for _ in range(runs):
            rows.add(f"RTT pod -> pod, {where} (ms)", ping_rtt_ms(client_ns, ip, 50))
    for _ in range(runs):
        before = _add_sum_count(first)
        started = time.monotonic()
        scale = [_scale_deployment(first.name, replicas)]
        tier.kube.apply(scale)
        tier.kube.rollout("deployment", SCALE, deploy.NAMESPACE, timeout=300)
        rows.add(f"{replicas}-pod Deployment all ready (s)", time.monotonic() - started)
        after = _add_sum_count(first)
        if after[1] > before[1]:
            rows.add("ADD under the kubelet, mean (ms)",
                     (after[0] - before[0]) / (after[1] - before[1]) * 1000)
        tier.kube.delete(scale)


def run_dataplane(kube: Kube, nodes: list[Node], dataplane: str, args: argparse.Namespace
                  ) -> Rows:
    """The tier's deployment (conftest.tier's steps) with `dataplane`, measured, torn down."""
    rows = Rows(dataplane)
    with deployed(kube, nodes, dataplane, VPP_SOCKET, ETCD_IMAGE, POD_IMAGE) as tier:
        try:
            measure(tier, rows, args.runs, args.seconds, args.replicas)
        except (RuntimeError, ValueError, subprocess.TimeoutExpired, AssertionError) as exc:
            rows.failures.append(f"{type(exc).__name__}: {exc}")
    return rows


def table(results: list[Rows]) -> str:
    names = list(dict.fromkeys(n for r in results for n in r.figures))
    head = ["figure", *(f"{r.dataplane} (median; runs)" for r in results)]
    if len(results) == 2:
        head.append("vpp / kernel")
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name in names:
        cells = [name]
        medians = []
        for r in results:
            values = r.figures.get(name, [])
            median = statistics.median(values) if values else None
            medians.append(median)
            cells.append("-" if median is None else
                         f"{median:.3g} ({', '.join(f'{v:.3g}' for v in values)})")
        if len(results) == 2:
            k, v = medians
            if k is None or v is None:
                cells.append("-")
            elif name.endswith("(%)"):  # a loss: the difference in points
                cells.append(f"{v - k:+.3g} points")
            else:
                cells.append(f"{v / k:.2f}x" if k else "-")
        lines.append("| " + " | ".join(cells) + " |")
    for r in results:
        lines += [f"\n{r.dataplane}: failed: {f}" for f in r.failures]
    return "\n".join(lines)


def section(results: list[Rows], args: argparse.Namespace, load: tuple[str, str],
            rcu: tuple[bool, bool]) -> str:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True, check=False).stdout.strip()
    return "\n".join([
        BEGIN,
        "## A real cluster: pod traffic and pod start-up (issue #25)",
        "",
        f"Command: `python -m tests.k8s_tier.bench --runs {args.runs} --seconds {args.seconds} "
        f"--replicas {args.replicas} --write`, with the k8s tier's environment "
        "([docs/k8s-tier.md](docs/k8s-tier.md): two Kubernetes v1.28 nodes, kubelet, "
        "containerd, stock kube-proxy in iptables mode; one VPP 26.06 per node for the VPP run, "
        "veth + AF_PACKET, interrupt mode). Both nodes are network namespaces of one machine "
        "and share its 2 cores: across-node figures pay for both nodes' work on the same "
        f"cores. Code: {commit}. Load average at the start {load[0]}, at the end {load[1]}. "
        "The VPP agents have `ExpediteKernelRcu: true` (the tier's config, docs/vpp.md); the "
        "machine-wide /sys/kernel/rcu_expedited was "
        f"{int(rcu[0])} at the start and {int(rcu[1])} at the end.",
        "",
        table(results),
        "",
        "The clients and servers are the node's iperf3 and ping in pods' namespaces; the "
        + ("ClusterIP rows go through kube-proxy's DNAT on the client's node (with VPP: out of "
           "VPP to the node and back in, masqueraded on the way, docs/vpp.md)."
           if deploy.service_translation("vpp") != "vpp" else
           "ClusterIP rows go through kube-proxy's DNAT on the kernel nodes and through VPP's "
           "cnat on the VPP nodes (`ServiceTranslation: vpp`, docs/vpp.md)."),
        END,
    ])


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--replicas", type=int, default=10)
    parser.add_argument("--dataplane", action="append", choices=["kernel", "vpp"])
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if not KUBECONFIG:
        raise SystemExit("VSWITCH_TEST_KUBECONFIG is not set: no cluster to measure "
                         "(docs/k8s-tier.md)")
    kube = Kube(KUBECTL, KUBECONFIG, NODE_NETNS)
    nodes = find_nodes(kube, [NODE_NETNS, *([NODE2_NETNS] if NODE2_NETNS else [])])
    dataplanes = args.dataplane or ["kernel", *(["vpp"] if VPP_SOCKET else [])]
    load_start, rcu_start = _load(), rcu.expedited()
    results = [run_dataplane(kube, nodes, d, args) for d in dataplanes]
    text = section(results, args, (load_start, _load()), (rcu_start, rcu.expedited()))
    print(text)
    if args.write:
        write_section(ROOT / "BENCHMARKS.md", text + "\n", BEGIN, END)


if __name__ == "__main__":
    main()

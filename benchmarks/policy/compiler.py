"""The policy compiler at scale: 1,000 NetworkPolicies over 5,000 pods, in process, no I/O.

    python -m benchmarks run policy-compile [--pods 5000] [--policies 1000] [--runs 5] [--json FILE]
                                         [--out BENCHMARKS.md]

The cluster is synthetic but shaped like a real one (seed fixed, so every run compiles the same
input): 50 namespaces of 100 pods (10 apps x 10 replicas, labels app/tier/version, named ports
http/metrics and for some apps grpc), one namespace in five dual-stack, plus kube-system with its
DNS pods; 100 nodes. Every namespace has a default deny, an allow from its own namespace, and
per app rules of the kinds clusters use: from apps of the same namespace on a named port, from a
team's frontends (namespaceSelector AND podSelector), from tiers by matchExpressions, a port
range, egress to DNS in kube-system and to the internet by ipBlock with excepts.

Measured (wall clock, after a warm-up run):
- parse: the JSON objects -> policy.model values (pod_from_k8s, ...);
- compile, every pod: the whole cluster's rule sets (a cluster-wide controller's job);
- compile, one node: one node's 50 pods, peers resolved from the whole cluster (an agent's job);
and the size of the result (rules, CIDRs). Nothing here asserts speed. With --out, also writes its
own section of that file, between its markers (benchmarks.core.sections).
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.core import machine
from benchmarks.core.kwok import synthetic_policy
from benchmarks.core.sections import markers, write_section
from benchmarks.core.stats import Summary
from policy import compile_policies, namespace_from_k8s, pod_from_k8s, policy_from_k8s

BEGIN, END = markers("policy-compile")
TIERS = ["web", "api", "db", "cache"]
Obj = dict[str, Any]


def _ports(app: int) -> list[Obj]:
    ports = [{"name": "http", "containerPort": 8080 + app % 3},
             {"name": "metrics", "containerPort": 9090}]
    if app % 4 == 0:
        ports.append({"name": "grpc", "containerPort": 50051})
    return ports


def cluster(n_pods: int, n_policies: int, seed: int = 7) -> tuple[list[Obj], list[Obj],
                                                                    list[Obj]]:
    """(namespaces, pods, policies) as the API would list them."""
    rng = random.Random(seed)
    n_ns = max(1, n_pods // 100)
    namespaces: list[Obj] = [{"metadata": {"name": "kube-system"}}]
    pods: list[Obj] = [{"metadata": {"namespace": "kube-system", "name": f"coredns-{i}",
                                     "labels": {"k8s-app": "kube-dns"}},
                        "spec": {"nodeName": f"node-{i}", "containers": [{"ports": [
                            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                            {"name": "dns-tcp", "containerPort": 53}]}]},
                        "status": {"podIP": f"10.0.0.{i + 2}"}} for i in range(2)]
    for n in range(n_ns):
        name = f"team{n % 10}-{n:02d}"
        namespaces.append({"metadata": {"name": name, "labels": {
            "team": f"team{n % 10}", "env": ["prod", "staging", "dev"][n % 3]}}})
        for i in range(100):
            app = i // 10
            ips = [{"ip": f"10.{1 + n // 200}.{n % 200}.{i + 2}"}]
            if n % 5 == 0:
                ips.append({"ip": f"fd00:{n:x}::{i + 2:x}"})
            pods.append({"metadata": {"namespace": name, "name": f"app{app}-{i}", "labels": {
                "app": f"app{app}", "tier": TIERS[app % 4], "version": f"v{1 + i % 2}",
                "pod-template-hash": f"h{app}"}},
                "spec": {"nodeName": f"node-{rng.randrange(100)}",
                         "containers": [{"name": "main", "ports": _ports(app)}]},
                "status": {"phase": "Running", "podIPs": ips}})
    policies = []
    for p in range(n_policies):
        n = p % n_ns
        policies.append(synthetic_policy(f"team{n % 10}-{n:02d}", p // n_ns, n_ns, rng))
    return namespaces, pods[:n_pods + 2], policies


def _timed(runs: int, fn: Any) -> tuple[Summary, Any]:
    fn()  # warm-up
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1000)
    return Summary.of(times, "ms"), result


def run(n_pods: int, n_policies: int, runs: int) -> dict[str, Any]:
    namespaces, pods, policies = cluster(n_pods, n_policies)

    def parse() -> tuple[list[Any], list[Any], list[Any]]:
        return ([pod_from_k8s(p) for p in pods], [namespace_from_k8s(n) for n in namespaces],
                [policy_from_k8s(p) for p in policies])

    parsing, (mpods, mns, mpol) = _timed(runs, parse)
    whole, compiled = _timed(runs, lambda: compile_policies(mpods, mns, mpol, sctp=True))
    node, _ = _timed(runs, lambda: compile_policies(mpods, mns, mpol, sctp=True, node="node-0"))
    rules = [r for p in compiled.pods.values() for d in (p.ingress, p.egress) for r in d.rules]
    return {"pods": len(mpods), "namespaces": len(mns), "policies": len(mpol),
            "parse": parsing.to_json(), "compile_all": whole.to_json(),
            "compile_one_node": node.to_json(),
            "isolated_pods": sum(p.ingress.isolated for p in compiled.pods.values()),
            "rules": len(rules), "cidrs": sum(len(r.peers) for r in rules)}


def section(f: dict[str, Any], runs: int, command: str, load: tuple[str, str],
            note: str = "") -> str:
    rows = [f"| {label} | {f[k]['min']:.1f} | {f[k]['median']:.1f} | {f[k]['p99']:.1f} |"
            for label, k in (("parse (JSON -> values)", "parse"),
                             ("compile, every pod", "compile_all"),
                             ("compile, one node's pods (an agent's apply)", "compile_one_node"))]
    return "\n".join([
        BEGIN, "## NetworkPolicy compiler at scale (issue #24)", "",
        f"Command: `{command}`. {f['policies']} policies over {f['pods']} pods in "
        f"{f['namespaces']} namespaces on 100 nodes (the synthetic cluster of the module's "
        f"docstring), in process, no I/O; {runs} runs after a warm-up, wall clock. Load average "
        f"{load[0]} at the start, {load[1]} at the end (2 shared cores). {note} Result: "
        f"{f['isolated_pods']} pods isolated, {f['rules']} rules, {f['cidrs']} CIDRs.", "",
        "| step | min ms | median ms | max ms |", "| --- | --- | --- | --- |", *rows, END, ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--policies", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--out", type=Path, help="write its section of this file "
                        "(BENCHMARKS.md); without it, only printed")
    parser.add_argument("--note", default="", help="what else ran on the machine (the report)")
    args = parser.parse_args()
    load_start = machine.loadavg()
    figures = run(args.pods, args.policies, args.runs)
    if args.out:
        command = "python -m benchmarks run policy-compile " + shlex.join(sys.argv[1:])
        write_section(args.out, section(figures, args.runs, command,
                                        (load_start, machine.loadavg()), args.note), BEGIN, END)
    print(f"{figures['policies']} policies over {figures['pods']} pods in "
          f"{figures['namespaces']} namespaces, {args.runs} runs after a warm-up:")
    for label, name in (("parse (JSON -> values)", "parse"), ("compile, every pod", "compile_all"),
                        ("compile, one node's pods", "compile_one_node")):
        s = figures[name]
        print(f"  {label:26} min {s['min']:8.1f} ms   median {s['median']:8.1f} ms")
    print(f"  result: {figures['isolated_pods']} pods isolated, {figures['rules']} rules, "
          f"{figures['cidrs']} CIDRs")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()

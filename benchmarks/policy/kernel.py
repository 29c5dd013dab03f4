"""The kernel renderer of NetworkPolicy (agent/linux/nftpolicy): its change times at a full node,
and what it costs a packet. As root; everything happens in namespaces it makes and removes.

    python -m benchmarks run policy-kernel [--pods 11000] [--policies 1000] [--runs 20]
                                        [--out BENCHMARKS.md]

Rules: benchmarks.policy.compiler's synthetic cluster (default deny per namespace, same-namespace
allows, named ports, namespace and tier selectors, DNS and internet egress), 11,000 pods over 100
nodes; the busiest node's pods (about 110) compiled by `policy.compile_policies(node=...)`.
Measured, in a fresh node namespace:
- apply, all pods: into an empty table; again unchanged; with one policy fewer;
- apply_pod (a CNI ADD's share) of one pod, and remove_pod, `--runs` times each;
- a peer change: a pod on another node, of a namespace with pods on this one and the labels of
  one of its pods, comes and goes (`--runs` applies of the node with it and without it): the
  apply's time and nftables commands;
- per packet: pod a -> pod b through the kernel dataplane, without policy and with the whole
  node's rules loaded and b isolated by the busiest pod's rules plus a last rule allowing a:
  single-stream TCP throughput (iperf3, 3 s), ping RTT (50 pings 10 ms apart), and new TCP
  connections per second (each one walks both chains: only a connection's first packet does).
Writes its own section of --out, between its markers (benchmarks.core.sections).
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import json
import os
import re
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.linux.nftpolicy import NftPolicy, PodRules
from benchmarks.core.netperf import iperf
from benchmarks.core.sections import markers, write_section
from benchmarks.core.stats import Summary
from benchmarks.policy.compiler import cluster
from policy import (
    DirectionRules,
    PodKey,
    Rule,
    compile_policies,
    namespace_from_k8s,
    pod_from_k8s,
    policy_from_k8s,
)
from testbed.netns import entered, named_netns, run_in
from testbed.pods import Subnets, started_driver, wire

BEGIN, END = markers("policy-kernel")


def _ms(fn: Callable[[], Any], runs: int) -> Summary:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return Summary.of(times, "ms")


Desired = dict[PodKey, PodRules]


def node_rules(n_pods: int, n_policies: int) -> tuple[Desired, Desired]:
    """The busiest node's rules; the same with one more pod on another node (a peer of the
    node's pods: a copy of one of them, elsewhere, with an address of its own)."""
    namespaces, pods, policies = cluster(n_pods, n_policies)
    busiest = Counter(p["spec"]["nodeName"] for p in pods).most_common(1)[0][0]
    local = next(p for p in pods if p["spec"]["nodeName"] == busiest
                 and p["metadata"]["namespace"] != "kube-system")
    joining = json.loads(json.dumps(local))
    joining["metadata"]["name"] = "joining-0"
    joining["spec"]["nodeName"] = "node-elsewhere"
    joining["status"]["podIPs"] = [{"ip": "10.250.0.2"}]
    mns, mpol = [namespace_from_k8s(n) for n in namespaces], [policy_from_k8s(p) for p in policies]
    node_ip = {busiest: [ipaddress.ip_address("192.168.100.1")]}

    def compiled(objs: list[Any]) -> Desired:
        mpods = [pod_from_k8s(p) for p in objs]
        by_key = {p.key: p for p in mpods}
        got = compile_policies(mpods, mns, mpol, sctp=True, node=busiest, node_addresses=node_ip)
        return {k: PodRules(v, by_key[k].ips) for k, v in got.pods.items()}
    return compiled(pods), compiled([*pods, joining])


def _connect_rate(src: str, addr: str, port: int, seconds: float = 2.0) -> float:
    with entered(src):
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.close()
    count, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        with entered(src):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        with s:
            s.settimeout(2)
            s.connect((addr, port))
            # closed by a reset: no TIME_WAIT socket or conntrack entry piles up, whose port
            # reuse would slow the later runs down whatever the rules
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        count += 1
    return count / seconds


def _listener(netns: str, addr: str, port: int, stop: threading.Event) -> threading.Thread:
    with entered(netns):
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(512)
    ls.settimeout(0.1)

    def serve() -> None:
        with ls:
            while not stop.is_set():
                try:
                    ls.accept()[0].close()
                except OSError:
                    continue
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def _traffic(a: str, b: str, b_addr: str) -> dict[str, float]:
    tcp = iperf(a, b, b_addr, [], 3)
    ping = run_in(a, "ping", "-q", "-c", "50", "-i", "0.01", b_addr).stdout
    rtt = re.search(r"= [\d.]+/([\d.]+)/", ping)
    stop = threading.Event()
    t = _listener(b, b_addr, 7070, stop)
    try:
        rate = _connect_rate(a, b_addr, 7070)
    finally:
        stop.set()
        t.join()
    return {"tcp_gbps": tcp["end"]["sum_received"]["bits_per_second"] / 1e9,  # type: ignore[index]
            "rtt_ms": float(rtt.group(1)) if rtt else float("nan"), "connects_per_s": rate}


def run(n_pods: int, n_policies: int, runs: int) -> dict[str, Any]:
    desired, joined = node_rules(n_pods, n_policies)
    chains = sum(d.isolated for r in desired.values() for d in (r.policy.ingress,
                                                                r.policy.egress))
    out: dict[str, Any] = {"pods": len(desired), "isolated_directions": chains}
    subnets = Subnets.pick()
    with named_netns("bnode") as node, entered(node), started_driver(node, subnets) as dp, \
            named_netns("bpa") as a_ns, named_netns("bpb") as b_ns:
        renderer = NftPolicy()
        start = time.perf_counter()
        first = renderer.apply(desired)
        out["apply_first_ms"] = (time.perf_counter() - start) * 1000
        out["commands"] = first.commands
        out["apply_same"] = _ms(lambda: renderer.apply(desired), 5).to_json()
        # the policy most of the node's rules come from (the first policy is a default deny:
        # it has no rule, and leaving it out changed nothing)
        dropped = Counter(p for r in desired.values() for d in (r.policy.ingress,
                                                                r.policy.egress)
                          for rule in d.rules for p in rule.policies).most_common(1)[0][0]
        out["dropped_policy"] = dropped
        fewer = {k: dataclasses.replace(v, policy=dataclasses.replace(
            v.policy, ingress=_without(v.policy.ingress, dropped),
            egress=_without(v.policy.egress, dropped))) for k, v in desired.items()}
        out["apply_changed"] = _ms(lambda: (renderer.apply(fewer), renderer.apply(desired)),
                                   3).to_json()
        commands: list[int] = []
        out["peer_change"] = _ms(lambda: commands.extend(
            (renderer.apply(joined).commands, renderer.apply(desired).commands)), runs).to_json()
        out["peer_change_commands"] = max(commands)
        out["peer_change_chains"] = sum(joined[k] != v for k, v in desired.items())
        key, rules = max(desired.items(), key=lambda kv: len(kv[1].policy.ingress.rules))
        out["apply_pod"] = _ms(lambda: (renderer.remove_pod(key),
                                        renderer.apply_pod(key, rules)), runs).to_json()
        out["remove_pod"] = _ms(lambda: (renderer.remove_pod(key),
                                         renderer.apply_pod(key, rules)), runs).to_json()
        out["busiest_rules"] = len(rules.policy.ingress.rules)
        pa, pb = subnets.pod(a_ns, 5, v6=False), subnets.pod(b_ns, 6, v6=False)
        wire(dp, pa)
        wire(dp, pb)
        a_addr, b_addr = pa.addresses[0].ip, pb.addresses[0].ip
        # without: the same table (conntrack on, as on any node with NAT), b not isolated
        renderer.apply(desired)
        out["without"] = _traffic(a_ns, b_ns, str(b_addr))
        last = Rule((ipaddress.ip_network(f"{a_addr}/32"),), None, ("bench/allow-a",))
        b_rules = PodRules(dataclasses.replace(rules.policy, pod=PodKey("bench", "b"),
                                               ingress=DirectionRules(True, (
                                                   *rules.policy.ingress.rules, last))),
                           (b_addr,))
        renderer.apply({**desired, PodKey("bench", "b"): b_rules})
        out["with"] = _traffic(a_ns, b_ns, str(b_addr))
        out["allowed_by_last_rule"] = renderer.counters().allowed["bench/allow-a"].packets
        renderer.remove()
    return out


def _without(spec: DirectionRules, policy: str) -> DirectionRules:
    kept = tuple(r for r in spec.rules if policy not in r.policies)
    if spec.shared is None:
        return DirectionRules(spec.isolated, kept)
    return DirectionRules(spec.isolated, kept,
                          tuple(r for r in spec.shared if policy not in r.policies))


def section(f: dict[str, Any], command: str) -> str:
    def med(name: str) -> str:
        return (f"{f[name]['median']:.1f} ms (min {f[name]['min']:.1f}, "
                f"max {f[name]['p99']:.1f}; n={f[name]['n']})")

    w, p = f["without"], f["with"]
    lines = [
        BEGIN, "## NetworkPolicy in the kernel (issue #24)", "",
        f"Command: `{command}` (as root). {f['pods']} pods of the busiest node, "
        f"{f['isolated_directions']} isolated directions, {f['commands']} nftables commands "
        "in a full apply; the busiest pod has "
        f"{f['busiest_rules']} ingress rules. Medians (min, max).", "",
        "| change | time |", "| --- | --- |",
        f"| apply, all pods, into an empty table | {f['apply_first_ms']:.1f} ms |",
        f"| apply, all pods, unchanged | {med('apply_same')} |",
        f"| apply, all pods, one policy fewer ({f['dropped_policy']}) then back (two applies) "
        f"| {med('apply_changed')} |",
        f"| remove_pod + apply_pod of the busiest pod | {med('apply_pod')} |",
        f"| a peer joins then leaves (two applies; {f['peer_change_chains']} of the node's "
        f"pods' rules name it; at most {f['peer_change_commands']} commands per apply) | "
        f"{med('peer_change')} |", "",
        "Pod a -> pod b through the kernel dataplane, the node's rules loaded in both rows (so "
        "conntrack is on in both); without: a and b not isolated; with: b isolated by the "
        "busiest pod's rules and a last rule allowing a (so a new connection "
        "walks all of them; counted "
        f"{f['allowed_by_last_rule']} packets).", "",
        "| | TCP Gbit/s (iperf3, 3 s) | RTT ms (ping) | new TCP connections/s |",
        "| --- | --- | --- | --- |",
        f"| without policy | {w['tcp_gbps']:.2f} | {w['rtt_ms']:.3f} | {w['connects_per_s']:.0f} |",
        f"| with policy | {p['tcp_gbps']:.2f} | {p['rtt_ms']:.3f} | {p['connects_per_s']:.0f} |",
        END, ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=11000)
    parser.add_argument("--policies", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("BENCHMARKS.md"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("needs root: it creates network namespaces and nftables tables")
    figures = run(args.pods, args.policies, args.runs)
    print(json.dumps(figures, indent=1))
    text = section(figures, "python -m benchmarks run policy-kernel")
    print(text)
    write_section(args.out, text, BEGIN, END)


__all__ = ["BEGIN", "END", "main", "run"]

if __name__ == "__main__":
    main()

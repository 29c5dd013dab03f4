"""NetworkPolicy on a node, end to end: how soon a change in the API is enforced, what policy
adds to a CNI ADD, and what it costs a packet; kernel dataplane, and VPP's when one is reachable.
As root; everything it makes (API server and etcds, agents, namespaces, links, nftables tables,
VPP interfaces) is removed at the end, also on failure or Ctrl-C.

    VSWITCH_TEST_KUBE_APISERVER=$KUBE_BIN/kube-apiserver [VSWITCH_TEST_VPP_SOCKET=...] \\
        python -m benchmarks run policy-enforce [--changes 50] [--live 20,100] [--measured 20]
            [--api-pods 300] [--api-policies 30] [--dataplanes kernel,vpp,vpp-l2]
            [--probe-gap MS] [--note TEXT] [--json FILE] [--logs DIR] [--out BENCHMARKS.md]

The setup (benchmarks/policy/kube.py): a real kube-apiserver holding --api-pods Pods on other
nodes and --api-policies NetworkPolicies (benchmarks.policy.compiler's synthetic cluster), the
real agent with `KubeConfig` as the shipped role's user, the benchmark as the kubelet of its node:
Pod objects, the real plugin's ADD, status IPs. The node's pods in namespace `bench`: a client,
a server (TCP listener on 7070) and workers up to the first --live count; two standing policies
select the workers (peers: a team's 100 pods, DNS, the internet), none selects client or server.

Measured per dataplane (kernel; vpp: `Dataplane: vpp`, veth + AF_PACKET, as deployed; vpp-l2:
the same with `UseL2Interconnect: true`, whose pods keep IPv4 TSO):
- enforcement: --changes times, a policy isolating the server (ingress from pods the client is
  not) created, then deleted. From the moment the POST / DELETE returns to the start of the first
  probe from the client's namespace that sees the new verdict: a TCP connect that gets no answer
  within 50 ms (denied; connects are tried back to back, so this is exact to well under 1 ms),
  or one that succeeds (allowed; tried with a 10 ms timeout: exact to 10 ms).
- ADD: with --live pods up, --measured pods added (and deleted, so the count stays) through the
  plugin: the exec's wall time, and the agent's /metrics over those ADDs (the ADD handler and its
  `policy` phase); the same with an agent without KubeConfig (NetworkPolicy off).
- per packet, client -> server: iperf3 one TCP stream for --seconds, ping RTT (--pings, 10 ms
  apart): NetworkPolicy off; on with the server not isolated; on with the server isolated by a
  policy of 40 rules (ipBlock x port) that do not match and a last one allowing the client.
Writes its own section of --out, between its markers (benchmarks.core.sections), and its picture
(policy-enforce.svg: the enforcement times' distributions) into docs/benchmarks/ beside --out.
Asserts no speed.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shlex
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path
from typing import Any

from benchmarks.core import agent_metrics, machine
from benchmarks.core.harness import (
    PodSubnets,
    bench_agent_config,
    interrupt_on_signals,
    launch_agent,
    remove_agent_links,
    wait_ready,
)
from benchmarks.core.kwok import USER, kube_api
from benchmarks.core.netperf import iperf
from benchmarks.core.plots import plot_dir
from benchmarks.core.sections import publish
from benchmarks.core.stats import Summary
from benchmarks.policy.enforce_report import BEGIN, END, plot, section
from benchmarks.policy.kernel import _listener
from benchmarks.policy.kube import Kubelet, Pod, create_policy, delete_policy, populate
from testbed.agent import AgentHandle
from testbed.etcd import EtcdServer
from testbed.kube import KubeApiServer
from testbed.netns import entered, run_in
from testbed.vpp import API_DIR_ENV, SOCKET_ENV, ipam_keys, isolated_config, remove_base

PORT = 7070
CLIENT, SERVER, WORKER = {"role": "client"}, {"app": "server"}, {"role": "worker"}
STANDING = {
    "workers-in": {"podSelector": {"matchLabels": WORKER}, "ingress": [
        {"from": [{"namespaceSelector": {"matchLabels": {"team": "team0"}}},
                  {"podSelector": {"matchLabels": WORKER}}], "ports": [{"port": 8080}]}]},
    "workers-out": {"podSelector": {"matchLabels": WORKER}, "policyTypes": ["Egress"],
                    "egress": [
        {"to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
         "ports": [{"protocol": "UDP", "port": 53}]},
        {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}],
         "ports": [{"port": 443}]}]},
}
ISOLATE = {"podSelector": {"matchLabels": SERVER}, "ingress": [{"from": [{
    "namespaceSelector": {"matchLabels": {"team": "team1"}},
    "podSelector": {"matchLabels": {"tier": "web"}}}], "ports": [{"port": PORT}]}]}
MANY_RULES = {"podSelector": {"matchLabels": SERVER}, "ingress": [
    *({"from": [{"ipBlock": {"cidr": f"10.{100 + i}.0.0/16"}}], "ports": [{"port": 1000 + i}]}
      for i in range(40)),
    {"from": [{"podSelector": {"matchLabels": CLIENT}}]}]}


def log(message: str) -> None:
    print(f"[policy-enforce {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- the node ------------------------------------------------------------------------------

@contextmanager
def node_agent(tmp: Path, etcd: list[str], dataplane: str, api: KubeApiServer | None,
               kubeconfig: Path | None = None) -> Iterator[AgentHandle]:
    """The agent (INFO, as deployed), NetworkPolicy on when `api` is given (through
    `kubeconfig` when given: a proxy in front of it); at the end stopped and what it made
    removed: links, its nftables table, VPP's base configuration."""
    extra: dict[str, Any] = {"KubeConfig": str(kubeconfig or api.kubeconfig(USER))} \
        if api else {}
    vrf = 0
    if dataplane.startswith("vpp"):
        vrf = 200 + secrets.randbelow(50) * 2
        extra |= isolated_config(os.environ[SOCKET_ENV], os.environ.get(API_DIR_ENV, ""),
                                 secrets.token_hex(2), vrf)
        # vpp-l2: no VXLAN mesh, so the veth pods keep IPv4 TSO (docs/vpp.md)
        extra["UseL2Interconnect"] = dataplane == "vpp-l2"
    name = f"agent-{dataplane}-{'on' if api else 'off'}"
    (tmp / name).mkdir()  # its own socket and state: a node of its own
    config = bench_agent_config(tmp / name, etcd, PodSubnets().take(), extra)
    if vrf:
        config["IPAMConfig"] |= ipam_keys(vrf)
    agent = launch_agent(tmp, config, name)
    pod_network = ""
    try:
        wait_ready(agent)
        if vrf:
            pod_network = str(agent.get("/contiv/v1/ipam")[1]["podNetwork"])
        yield agent
    finally:
        agent.stop()
        try:
            if pod_network:  # VPP's AF_PACKET interface before the veth under it
                remove_base(config, pod_network)
        finally:
            if config.get("VPPHostInterface"):
                subprocess.run(["ip", "link", "del", str(config["VPPHostInterface"])],
                               capture_output=True, check=False)
            remove_agent_links(config)


def connects(netns: str, addr: str, timeout: float) -> bool:
    """One TCP connect from `netns`; closed by a reset (no TIME_WAIT piles up)."""
    with entered(netns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with sock:
        sock.settimeout(timeout)
        try:
            sock.connect((addr, PORT))
        except OSError:
            return False
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        return True


DENY_TIMEOUT, ALLOW_TIMEOUT = 0.05, 0.01
PROBE_GAP = [0.0]  # seconds between probes (--probe-gap)


def verdict_after(t0: float, src: Pod, dst: Pod, allowed: bool, limit: float) -> float | None:
    """ms from t0 to the start of the first probe that sees the verdict; None if none did."""
    timeout = ALLOW_TIMEOUT if allowed else DENY_TIMEOUT
    while time.monotonic() - t0 < limit:
        start = time.monotonic()
        if connects(src.netns, dst.ip, timeout) == allowed:
            return (start - t0) * 1000
        time.sleep(PROBE_GAP[0])
    return None


def wait_verdict(src: Pod, dst: Pod, allowed: bool, limit: float = 30.0) -> None:
    if verdict_after(time.monotonic(), src, dst, allowed, limit) is None:
        raise RuntimeError(f"{src.name} -> {dst.name}: not {'allowed' if allowed else 'denied'}"
                           f" within {limit:.0f} s")


# --- the measurements ----------------------------------------------------------------------

def conntrack_count() -> int:
    """Tracked connections in this (the node's) namespace: what the agent's sweep reads."""
    return int(Path("/proc/sys/net/netfilter/nf_conntrack_count").read_text())


def enforcement(api: KubeApiServer, client: Pod, server: Pod, changes: int) -> dict[str, Any]:
    deny: list[float] = []
    allow: list[float] = []
    tracked: list[int] = []
    missed = 0
    for _ in range(changes):
        for allowed in (False, True):
            tracked.append(conntrack_count())
            if allowed:
                delete_policy(api, "isolate-server")
            else:
                create_policy(api, "isolate-server", ISOLATE)
            t0 = time.monotonic()
            took = verdict_after(t0, client, server, allowed, 15.0)
            if took is None:
                missed += 1
                wait_verdict(client, server, allowed)
            else:
                (allow if allowed else deny).append(took)
            time.sleep(0.2 + secrets.randbelow(200) / 1000)  # apart, at no fixed phase
    return {"deny": deny, "allow": allow, "missed": missed, "conntrack": tracked}


def _hist(h: agent_metrics.Histogram | None) -> dict[str, float]:
    if h is None or not h.count:
        return {"count": 0.0, "mean_ms": float("nan"), "p50_le_ms": float("nan"),
                "p99_le_ms": float("nan")}
    return {"count": h.count, "mean_ms": h.mean * 1000, "p50_le_ms": h.quantile_bound(0.5) * 1000,
            "p99_le_ms": h.quantile_bound(0.99) * 1000}


def _calls(before: agent_metrics.Series, after: agent_metrics.Series) -> dict[str, float]:
    """VPP API calls per message between two snapshots (none with the kernel dataplane)."""
    calls = agent_metrics.delta(before, after, agent_metrics.VPP_CALLS)
    return {k: h.count for k, h in sorted(calls.items(), key=lambda kv: -kv[1].count) if h.count}


def add_latency(kubelet: Kubelet, agent: AgentHandle, live: list[int], measured: int
                ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for target in live:
        while len(kubelet.pods) < target:
            kubelet.add(f"fill-{len(kubelet.pods)}-{secrets.token_hex(2)}", WORKER)
        log(f"  {measured} ADDs with {target} live pods")
        before, walls = agent_metrics.snapshot(agent), []
        for i in range(measured):
            pod, took = kubelet.add(f"m{target}-{i}-{secrets.token_hex(2)}", WORKER)
            walls.append(took)
            kubelet.delete(pod.name)
        after = agent_metrics.snapshot(agent)
        phases = agent_metrics.delta(before, after, agent_metrics.PHASES)
        requests = agent_metrics.delta(before, after, agent_metrics.REQUESTS)
        out[str(target)] = {"wall": Summary.of(walls, "ms").to_json(),
                            "handler": _hist(requests.get("ADD")),
                            "policy": _hist(phases.get("policy")),
                            "phases": {k: _hist(h) for k, h in phases.items()},
                            "vpp_calls": _calls(before, after)}
    return out


def packet_cost(client: Pod, server: Pod, seconds: int, pings: int) -> dict[str, Any]:
    tcp = iperf(client.netns, server.netns, server.ip, [], seconds)
    ping = run_in(client.netns, "ping", "-q", "-c", str(pings), "-i", "0.01", server.ip).stdout
    rtt = re.search(r"= [\d.]+/([\d.]+)/", ping)
    end: Any = tcp["end"]
    return {"tcp_gbps": end["sum_received"]["bits_per_second"] / 1e9,
            "retransmits": end["sum_sent"].get("retransmits", -1),
            "rtt_ms": float(rtt.group(1)) if rtt else float("nan")}


@contextmanager
def node_pods(kubelet: Kubelet, workers: int) -> Iterator[tuple[Pod, Pod, Pod]]:
    """client, server (listening on PORT) and a first worker; `workers` workers in all."""
    client, _ = kubelet.add("client", CLIENT)
    server, _ = kubelet.add("server", SERVER)
    first = None
    for i in range(workers):
        pod, _ = kubelet.add(f"w-{i}", WORKER)
        first = first or pod
    assert first is not None
    stop = threading.Event()
    thread = _listener(server.netns, server.ip, PORT, stop)
    try:
        yield client, server, first
    finally:
        stop.set()
        thread.join()


def run_dataplane(tmp: Path, api: KubeApiServer, etcd: list[str], dataplane: str,
                  args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with node_agent(tmp, etcd, dataplane, api) as agent, \
            closing(Kubelet(api, agent)) as kubelet, \
            node_pods(kubelet, args.live[0] - 2) as (client, server, worker):
        wait_verdict(client, server, True)
        log(f"{dataplane}: {args.changes} x (policy created, deleted)")
        before = agent_metrics.snapshot(agent)
        out["enforce"] = enforcement(api, client, server, args.changes)
        out["enforce"]["vpp_calls"] = _calls(before, agent_metrics.snapshot(agent))
        log(f"{dataplane}: per packet, policy on")
        out["traffic_on"] = packet_cost(client, server, args.seconds, args.pings)
        create_policy(api, "many-rules", MANY_RULES)
        wait_verdict(worker, server, False)
        wait_verdict(client, server, True)
        out["traffic_rules"] = packet_cost(client, server, args.seconds, args.pings)
        status, shown = agent.get(f"/v1/policy/bench/{server.name}")
        out["rules"] = len(shown["attachments"][0]["ingress"]["rules"]) if status == 200 else 0
        delete_policy(api, "many-rules")
        log(f"{dataplane}: ADD latency, policy on")
        out["add_on"] = add_latency(kubelet, agent, args.live, args.measured)
    with node_agent(tmp, etcd, dataplane, None) as agent, \
            closing(Kubelet(api, agent)) as kubelet, \
            node_pods(kubelet, args.live[0] - 2) as (client, server, _):
        wait_verdict(client, server, True)
        log(f"{dataplane}: per packet and ADD latency, policy off")
        out["traffic_off"] = packet_cost(client, server, args.seconds, args.pings)
        out["add_off"] = add_latency(kubelet, agent, args.live, args.measured)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               "load_start": machine.loadavg(), "machine": machine.machine(),
                               "args": {k: v for k, v in vars(args).items() if k != "out"}}
    with ExitStack() as stack:
        tmp = args.logs or stack.enter_context(tempfile.TemporaryDirectory(prefix="vcni-polenf-"))
        etcd, api = stack.enter_context(EtcdServer()), stack.enter_context(kube_api())
        log("populating the API")
        figures["api"] = populate(api, args.api_pods, args.api_policies)
        for name, spec in STANDING.items():
            create_policy(api, name, spec)
        for dataplane in args.dataplanes:
            if dataplane.startswith("vpp") and not os.path.exists(os.environ.get(SOCKET_ENV,
                                                                                 "")):
                figures["vpp_note"] = f"not measured: {SOCKET_ENV} names no VPP socket"
                continue
            figures[dataplane] = run_dataplane(Path(tmp), api, etcd.endpoints, dataplane, args)
    figures["load_end"] = machine.loadavg()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=50, help="creates (and as many deletes)")
    parser.add_argument("--live", type=lambda s: [int(x) for x in s.split(",")],
                        default=[20, 100], help="live pod counts for the ADD figures")
    parser.add_argument("--measured", type=int, default=20, help="ADDs measured per count")
    parser.add_argument("--api-pods", type=int, default=300)
    parser.add_argument("--api-policies", type=int, default=30)
    parser.add_argument("--dataplanes", type=lambda s: s.split(","),
                        default=["kernel", "vpp", "vpp-l2"],
                        help="kernel, vpp (as deployed), vpp-l2 (UseL2Interconnect: pod TSO)")
    parser.add_argument("--probe-gap", type=float, default=0.0,
                        help="ms between enforcement probes (0: back to back)")
    parser.add_argument("--seconds", type=int, default=5, help="iperf3 duration")
    parser.add_argument("--pings", type=int, default=100)
    parser.add_argument("--note", default="", help="what else ran on the machine (the report)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--logs", type=Path, help="keep the agents' configs and logs here")
    parser.add_argument("--out", type=Path, default=Path("BENCHMARKS.md"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("needs root: it creates network namespaces and links")
    if args.live[0] < 3:
        parser.error("--live: the first count must leave room for client, server and a worker")
    PROBE_GAP[0] = args.probe_gap / 1000
    interrupt_on_signals()
    figures = run(args)
    publish(figures, section(figures, "python -m benchmarks run policy-enforce "
                             + shlex.join(sys.argv[1:])), args.out, BEGIN, END, args.json)
    log(f"wrote {plot(figures, plot_dir(args.out))}")


if __name__ == "__main__":
    main()

"""The node mesh at scale: one agent (kernel dataplane) programming a registry of N synthetic nodes.

    python -m benchmarks run mesh-scale [--nodes 1000] [--events 20] [--json FILE]

The environment is the multi-node one of the tests (testbed/cluster.py): a fabric namespace
with etcd, one node namespace with its agent. The N other nodes are synthetic registry entries
(node IDs 2..N+1, node IPs from 100.100.0.0/16 that nothing answers: the kernel programs FDB
entries, neighbors and routes for them all the same), written by a helper process inside the
fabric namespace before the agent starts. Measured:

- converge: from starting the agent process to the kernel holding the routes of all N nodes
  (IPv4 routes with protocol 118 in the node namespace), and from its readiness;
- per later node event: a node added (registry put -> its route present) and removed (delete ->
  route gone), `--events` of each, one at a time; CLOCK_MONOTONIC is one clock for all processes;
- the agent's RSS (VmRSS) once converged, and its CPU time for the convergence.

Nothing here asserts speed; BENCHMARKS.md quotes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.model.node import local_node
from agent.state.store import Store
from benchmarks.core.harness import REPO
from benchmarks.core.sections import markers, write_section
from ipam import IPAMConfig, node_networks
from testbed.cluster import ETCD_URL, Cluster, Node

IPAM = {"PodSubnetCIDR": "10.128.0.0/9", "PodNetworkPrefixLen": 24,
        "VPPHostSubnetCIDR": "172.16.0.0/12", "VPPHostNetworkPrefixLen": 24,
        "VxlanCIDR": "100.64.0.0/16", "NodeInterconnectCIDR": "192.168.0.0/16"}
PREFIX = "/vswitch-cni/"
BEGIN, END = markers("mesh-scale")


def synthetic(node_id: int) -> dict[str, Any]:
    cfg = IPAMConfig.from_mapping(IPAM)[0]
    ip = f"100.100.{node_id // 256}.{node_id % 256}"
    return local_node(f"synthetic-{node_id}", ip, node_networks(cfg, node_id)).to_json()


def writer() -> None:
    """Inside the fabric namespace: `put ID` / `del ID` lines -> `ok <monotonic>`."""
    etcd = Store([ETCD_URL], PREFIX, 10.0).etcd
    for line in sys.stdin:
        verb, first, last = [*line.split(), "", ""][:3]
        ids = range(int(first), int(last or first) + 1)
        for node_id in ids:
            key = f"{PREFIX}registry/{node_id}"
            if verb == "put":
                etcd.put(key, json.dumps(synthetic(node_id)))
            else:
                etcd.delete(key)
        print(f"ok {time.monotonic()}", flush=True)


class Writer:
    def __init__(self, fabric: str) -> None:
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", fabric, sys.executable, "-m", "benchmarks.scale.mesh",
             "--writer"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)

    def send(self, line: str) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline().split()
        assert reply and reply[0] == "ok", reply
        return float(reply[1])

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def mesh_routes(node: Node, exact: str = "") -> set[str]:
    """The IPv4 pod subnets routed by the mesh (iproute2: its C dump costs the measurement
    little; pyroute2 would spend ~100 ms parsing 1000 routes)."""
    argv = ["ip", "-n", node.netns, "-4", "route", "show", "proto", "118"]
    if exact:
        argv += ["exact", exact]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def wait_routes(node: Node, check: Any, timeout: float = 600, exact: str = "") -> float:
    deadline = time.monotonic() + timeout
    while not check(mesh_routes(node, exact)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"not converged after {timeout}s:\n{node.log()}")
        time.sleep(0.005)
    return time.monotonic()


def proc_stats(pid: int) -> tuple[float, float]:
    """(VmRSS in MiB, CPU seconds) of a process."""
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text()
               .splitlines() if line.startswith("VmRSS:"))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return rss / 1024, cpu


def run(nodes: int, events: int) -> dict[str, Any]:
    def subnet(node_id: int) -> str:
        return str(synthetic(node_id)["podSubnets"][0])

    with tempfile.TemporaryDirectory(prefix="vswitch-mesh-bench-") as tmp, \
            Cluster(Path(tmp), {"IPAMConfig": IPAM}) as cluster:
        node = cluster.add_node(start=False)
        writer_proc = Writer(cluster.fabric)
        try:
            writer_proc.send(f"put 2 {nodes + 1}")
            started = time.monotonic()
            node.start_agent(wait=False)
            node.wait_ready(timeout=600)
            ready = time.monotonic()
            want = {subnet(i) for i in range(2, nodes + 2)}
            done = wait_routes(node, lambda have: want <= have)
            assert node.process is not None
            rss, cpu = proc_stats(node.process.pid)
            adds, dels = [], []
            for i in range(nodes + 2, nodes + 2 + events):
                put = writer_proc.send(f"put {i}")
                adds.append(wait_routes(node, _holds(subnet(i), True), exact=subnet(i)) - put)
            for i in range(nodes + 2, nodes + 2 + events):
                gone = writer_proc.send(f"del {i}")
                dels.append(wait_routes(node, _holds(subnet(i), False), exact=subnet(i)) - gone)
            return {
                "nodes": nodes, "events": events,
                "converge_from_start_s": round(done - started, 3),
                "converge_from_ready_s": round(done - ready, 3),
                "agent_cpu_s": round(cpu, 2), "agent_rss_mib": round(rss, 1),
                "add_ms": _stats(adds), "remove_ms": _stats(dels),
            }
        finally:
            writer_proc.close()


def _holds(subnet: str, present: bool) -> Any:
    return lambda have: (subnet in have) == present


def _stats(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    return {"p50": round(statistics.median(ms), 1), "max": round(ms[-1], 1),
            "mean": round(statistics.fmean(ms), 1)}


def render(r: dict[str, Any]) -> str:
    return "\n".join([
        f"One agent (kernel dataplane) and a registry of {r['nodes']} synthetic nodes:",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| converge, from agent start | {r['converge_from_start_s']} s |",
        f"| converge, from agent ready | {r['converge_from_ready_s']} s |",
        f"| agent CPU until converged | {r['agent_cpu_s']} s |",
        f"| agent RSS, converged | {r['agent_rss_mib']} MiB |",
        f"| node added -> routed ({r['events']} events) | p50 {r['add_ms']['p50']} ms, "
        f"max {r['add_ms']['max']} ms |",
        f"| node removed -> unrouted ({r['events']} events) | p50 {r['remove_ms']['p50']} ms, "
        f"max {r['remove_ms']['max']} ms |",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks run mesh-scale",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--json", help="also write the results as JSON to this file")
    parser.add_argument("--writer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=REPO / "BENCHMARKS.md")
    args = parser.parse_args(argv)
    if args.writer:
        writer()
        return 0
    result = run(args.nodes, args.events)
    command = shlex.join(["python", "-m", "benchmarks", "run", "mesh-scale",
                          *(sys.argv[1:] if argv is None else argv)])
    text = "\n".join([BEGIN, "## Node mesh at scale (issue #11)", "", render(result), "",
                      f"Command: `{command}`. The synthetic nodes' addresses are in a range "
                      "nothing answers; the kernel programs their FDB entries, neighbors and "
                      "routes all the same.", END])
    print(text)
    write_section(args.out, text + "\n", BEGIN, END)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

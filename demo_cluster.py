"""The main job as a cluster on one machine: three nodes, two pods each, pinging across nodes.

`python3 -m demo_cluster` (what `make demo` runs; `python3 -m demo` is the one-node demo) builds
the test bed's cluster (testbed/cluster.py): a fabric namespace with a bridge and etcd on it,
three node namespaces with an uplink into the bridge and their own `vswitch-agent` (kernel
dataplane, VXLAN mesh between the nodes), and two dual-stack pods per node ADDed through the real
`vswitch-cni` executable with that node's socket. It pings every pod from every other pod across
nodes (IPv4 and IPv6), shows node-1's view of the node registry (GET /v1/nodes) and its mesh
routes, then keeps everything until Ctrl-C (`--once` stops right after). On the way out every
pod is DELed and every namespace, process and file removed. Nothing leaves this machine: the
node and pod addresses exist only inside the namespaces made here.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path

from testbed import tools
from testbed.cluster import Cluster, Node, Pod, converged, sh, wait_for
from testbed.podcheck import ping

NODES = 3
PODS_PER_NODE = 2


def step(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def ping_across(pods: list[Pod]) -> bool:
    ok = True
    for a in pods:
        for b in pods:
            if a.node is b.node:
                continue
            for ip in b.ips:
                good = ping(a, ip)
                ok = ok and good
                print(f"  {a.node.name}/{a.name} -> {b.node.name}/{b.name} {ip:<18} "
                      f"{'ok' if good else 'FAILED'}", flush=True)
    return ok


def show_view(node: Node) -> None:
    status, body = node.get("/v1/nodes")
    if status != 200:
        print(f"  GET /v1/nodes: {status} {body}")
        return
    for entry in body["nodes"]:
        mesh = entry.get("mesh", {})
        print(f"  {entry['name']:<8} ID {entry['id']}  node IP {entry['nodeIP']:<14} "
              f"VXLAN {entry['vxlanIP']:<14} pods {', '.join(entry['podSubnets'])}  "
              f"{mesh.get('state', '')} {mesh.get('reason', '')}")
    routes = sh("ip", "-n", node.netns, "route", "show", "proto", "118").stdout
    routes += sh("ip", "-n", node.netns, "-6", "route", "show", "proto", "118").stdout
    print(f"\n  {node.name}'s mesh routes (ip -n {node.netns} route show proto 118):")
    print("".join(f"    {line}\n" for line in routes.splitlines()), end="")


def run(workdir: Path, once: bool) -> bool:
    with Cluster(workdir) as cluster:
        step(f"fabric namespace {cluster.fabric}: bridge 192.168.16.254/24 and etcd on it")
        step(f"starting {NODES} nodes (a namespace and a vswitch-agent each)")
        nodes = []
        for _ in range(NODES):
            node = cluster.add_node()
            nodes.append(node)
            print(f"  {node.name}: namespace {node.netns}, node IP {node.node_ip}, "
                  f"REST :{node.rest_port} inside it")
        step(f"adding {PODS_PER_NODE} pods per node through the vswitch-cni executable")
        pods = []
        for node in nodes:
            for _ in range(PODS_PER_NODE):
                pod = node.add_pod()
                pods.append(pod)
                print(f"  {node.name}/{pod.name}: {', '.join(pod.ips)}")
        wait_for(lambda: converged(nodes), 60, "the node mesh")
        step("pinging every pod on every other node (IPv4 and IPv6, over VXLAN)")
        ok = ping_across(pods)
        step(f"{nodes[0].name}'s view of the node registry (GET /v1/nodes)")
        show_view(nodes[0])
        if not once and ok:
            step("serving; try: ip netns exec <pod> ping <address>. Ctrl-C to remove it all")
            stop = threading.Event()
            signal.signal(signal.SIGINT, lambda *_: stop.set())
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            stop.wait()
        step("deleting the pods, stopping the agents and etcd, removing the namespaces")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--once", action="store_true", help="stop after the pings")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the demo creates network namespaces: run it as root")
    try:
        tools.plugin()  # before anything is built: say what to run if set-up is missing
    except tools.NotInstalled as exc:
        raise SystemExit(str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="vswitch-cluster-demo-") as workdir:
        ok = run(Path(workdir), args.once)
    print("\nall pods reached each other across nodes" if ok else "\nsome pings FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The main job on one node: etcd, the agent, two pods wired through the real plugin, pings.

`python3 -m demo` (`make demo-node`, which sets up first) starts a single-member etcd on loopback,
a `vswitch-agent` with the kernel dataplane, creates two network namespaces as pods, ADDs them
through the real `vswitch-cni` executable exactly as a container runtime would, pings pod to pod
and pod to node, shows the agent's REST view, then keeps serving until Ctrl-C (`--once` stops
right after the pings). On the way out it DELs both pods and removes everything it created.
Nothing leaves this machine: all addresses are in namespaces made here. Its ports (etcd's two,
the agent's REST) are free ones picked at start and printed; if anything fails, the end of etcd's
and the agent's logs is printed before their temp dirs go. The pieces are the test bed's
(`testbed/`), the same ones the tests and benchmarks use.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from testbed import tools
from testbed.agent import AgentHandle, run_plugin, serving_agent
from testbed.etcd import EtcdServer, free_port
from testbed.netns import ping

POD_SUBNET = "10.231.0.0/16"
LOG_TAIL = 2000  # characters of the agent's log shown on failure


def step(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def agent_config(workdir: Path, etcd_url: str) -> dict[str, Any]:
    return {
        "NodeName": "demo-node",
        "EtcdEndpoints": [etcd_url],
        "CNISocket": str(workdir / "cni.sock"),
        "StateDir": str(workdir / "state"),
        "HTTPAddress": f"127.0.0.1:{free_port()}",
        "Dataplane": "kernel",
        "GatewayInterface": "vswdemo0",
        # The demo's pods talk to each other and the node only: no egress NAT, and a table of
        # its own name so that a real agent's on this machine is never touched.
        "NatExternalTraffic": False,
        "NatTable": "vswitch-cni-demo",
        "IPAMConfig": {"PodSubnetCIDR": POD_SUBNET, "PodNetworkPrefixLen": 24},
    }


@contextmanager
def logs_shown_on_failure(etcd: EtcdServer, agents: list[AgentHandle]) -> Iterator[None]:
    """On any failure, the end of etcd's and the agent's logs before their files go."""
    try:
        yield
    except BaseException as exc:
        if not (isinstance(exc, SystemExit) and exc.code in (0, None)):
            print(etcd.logs(), file=sys.stderr)
            for handle in agents:
                print(f"--- agent ---\n{handle.log()[-LOG_TAIL:]}", file=sys.stderr, flush=True)
        raise


def plugin(command: str, netconf: dict[str, Any], name: str) -> dict[str, Any]:
    out = run_plugin(command, netconf, container_id=name, netns=f"/var/run/netns/{name}",
                     args=f"K8S_POD_NAMESPACE=demo;K8S_POD_NAME={name}")
    if out.returncode != 0:
        raise SystemExit(f"{command} {name} failed: {out.stdout}{out.stderr}")
    return out.json if out.stdout.strip() else {}


@contextmanager
def pod(name: str, netconf: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """A namespace ADDed through the plugin; yields (address, gateway); DELed at the end."""
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        result = plugin("ADD", netconf, name)
        address, gateway = result["ips"][0]["address"], result["ips"][0]["gateway"]
        print(f"{name}: {address} (gateway {gateway})")
        yield address.split("/")[0], gateway
        plugin("DEL", netconf, name)
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def pinged(source: str, target: str) -> bool:
    good = ping(f"/var/run/netns/{source}", target)
    print(f"ping {source} -> {target}: {'ok' if good else 'FAILED'}", flush=True)
    return good


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--once", action="store_true", help="stop after the pings")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the demo creates network namespaces: run it as root")
    try:
        tools.plugin()  # before anything starts: say what to run if set-up is missing
    except tools.NotInstalled as exc:
        raise SystemExit(str(exc)) from None
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vswitch-demo-")))
        step("starting etcd on 127.0.0.1 (free ports)")
        etcd = stack.enter_context(EtcdServer())
        print(f"etcd: {etcd.endpoints[0]}")
        agents: list[AgentHandle] = []
        # Entered before the agent, so it runs after the agent stopped and flushed its log.
        stack.enter_context(logs_shown_on_failure(etcd, agents))
        config = agent_config(workdir, etcd.endpoints[0])
        rest = f"http://{config['HTTPAddress']}"
        step(f"starting vswitch-agent (kernel dataplane), REST on {rest}")
        agents.append(stack.enter_context(serving_agent(workdir, config)))
        netconf = {"cniVersion": "1.1.0", "name": "demo", "type": "vswitch-cni",
                   "agentSocket": config["CNISocket"], "stateDir": config["StateDir"]}
        step("adding two pods through the vswitch-cni executable")
        a, gateway = stack.enter_context(pod("vswdemo-a", netconf))
        b, _ = stack.enter_context(pod("vswdemo-b", netconf))
        step("pinging")
        ok = pinged("vswdemo-a", b) and pinged("vswdemo-b", a)
        ok = pinged("vswdemo-a", gateway) and ok  # the gateway address lives on the node
        step("the agent's IPAM view (GET /contiv/v1/ipam)")
        status, ipam = agents[0].get("/contiv/v1/ipam")
        print(json.dumps(ipam, indent=2) if status == 200 else f"{status} {ipam}")
        if not args.once and ok:
            step(f"serving: REST on {rest} ; Ctrl-C to remove the pods and stop")
            stop = threading.Event()
            signal.signal(signal.SIGINT, lambda *_: stop.set())
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            stop.wait()
        if not ok:
            print(etcd.logs(), f"--- agent ---\n{agents[0].log()[-LOG_TAIL:]}", sep="\n",
                  file=sys.stderr)
        step("deleting the pods and stopping")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""A multi-node cluster on one machine: node namespaces on a fabric bridge, one etcd, real agents.

Layout (every name unique per run, every namespace removed in `close()`, also after a failure):

    fabric namespace    bridge `br0` with 192.168.16.254/24, and etcd listening on that address
                        (port 2379; the namespace is private, so fixed ports cannot collide)
    node namespace i    uplink `eth0` (veth into br0) with node IP 192.168.16.<10+i>/24, MTU 1500;
                        its own vswitch-agent (`ip netns exec`), NodeName, CNI socket, StateDir,
                        REST on node:<9900+i> (loopback and the node IP) inside the namespace
    pod namespaces      ADDed through the real `vswitch-cni` executable with the node's socket

etcd runs in the fabric namespace because the agents run in their node namespaces, where
127.0.0.1 is their own loopback: the fabric is the one network every node reaches, as a real
cluster's etcd is reached over the node network. The test process itself reaches etcd and the
agents' REST from threads that entered those namespaces (`in_netns`). Nothing leaves these
namespaces: node IPs exist only inside them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from testbed import tools
from testbed.agent import stop_process
from testbed.netns import NodeExecutor, unique
from testbed.tools import REPO

T = TypeVar("T")
FABRIC_IP = "192.168.16.254"
ETCD_URL = f"http://{FABRIC_IP}:2379"
POD_V4 = "10.1.0.0/16"
POD_V6 = "fd00:10::/48"


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check)


def in_netns(netns: str, fn: Callable[[], T]) -> T:
    """Runs `fn` in a thread inside the namespace named `netns`."""
    with NodeExecutor(f"/var/run/netns/{netns}", 1) as pool:
        return pool.submit(fn).result()


@dataclass
class Pod:
    name: str  # also its namespace name and container ID
    node: Node
    ips: list[str] = field(default_factory=list)  # bare addresses, v4 first

    @property
    def netns(self) -> str:
        return f"/var/run/netns/{self.name}"


@dataclass
class Node:
    cluster: Cluster
    index: int
    name: str
    netns: str
    node_ip: str
    via_env: bool = False  # node IP from NODE_IP instead of NodeIP
    extra: dict[str, Any] = field(default_factory=dict)  # config keys of this node only
    process: subprocess.Popen[bytes] | None = None
    pods: list[Pod] = field(default_factory=list)

    @property
    def dir(self) -> Path:
        return self.cluster.workdir / self.name

    @property
    def socket(self) -> str:
        return str(self.dir / "cni.sock")

    @property
    def rest_port(self) -> int:
        return 9900 + self.index

    @property
    def fabric_port(self) -> str:
        """The fabric's end of this node's uplink (a port of br0): every frame the node sends
        or receives passes it."""
        return f"f{self.index}{self.netns[-4:]}"

    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "NodeName": self.name,
            "EtcdEndpoints": [ETCD_URL],
            "CNISocket": self.socket,
            "StateDir": str(self.dir / "state"),
            "HTTPAddress": f"node:{self.rest_port}",  # loopback and the node IP
            "Dataplane": "kernel",
            # wireguard-go's control socket is /var/run/wireguard/<name>.sock, one directory
            # for every namespace of this machine: each node's device has a name of its own
            "WireGuardInterface": "wg" + self.netns.removeprefix("cnode"),
            "IPAMConfig": {"PodSubnetCIDR": POD_V4, "PodNetworkPrefixLen": 24,
                           "PodSubnetV6CIDR": POD_V6, "PodNetworkV6PrefixLen": 64},
            **self.cluster.extra_config,
            **self.extra,
        }
        if not self.via_env:
            config["NodeIP"] = self.node_ip
        return config

    def start_agent(self, wait: bool = True) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / "agent.yaml"
        path.write_text(yaml.safe_dump(self.config()))
        env = {**os.environ, **({"NODE_IP": self.node_ip} if self.via_env else {})}
        with open(self.dir / "agent.log", "ab") as log:
            self.process = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, sys.executable, "-m", "agent.main",
                 "--config", str(path), "--log-level", "DEBUG"],
                stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env,
            )
        if wait:
            self.wait_ready()

    def log(self) -> str:
        path = self.dir / "agent.log"
        return path.read_text(errors="replace")[-6000:] if path.exists() else ""

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"agent {self.name} exited:\n{self.log()}")
            status, _ = self.get("/readiness")
            if status == 200:
                return
            time.sleep(0.1)
        raise RuntimeError(f"agent {self.name} not ready after {timeout}s:\n{self.log()}")

    def get(self, path: str) -> tuple[int, Any]:
        """GET a REST path of this node's agent (from inside its namespace)."""
        url = f"http://127.0.0.1:{self.rest_port}{path}"

        def fetch() -> tuple[int, Any]:
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    return int(resp.status), json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                return int(exc.code), exc.read().decode()
            except OSError as exc:
                return 0, str(exc)

        return in_netns(self.netns, fetch)

    def get_text(self, path: str) -> tuple[int, str]:
        """GET a REST path that answers text (/metrics)."""
        url = f"http://127.0.0.1:{self.rest_port}{path}"

        def fetch() -> tuple[int, str]:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return int(resp.status), resp.read().decode()

        return in_netns(self.netns, fetch)

    def node_id(self) -> int:
        status, body = self.get("/contiv/v1/ipam")
        assert status == 200, body
        return int(body["nodeId"])

    def stop_agent(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None:
            stop_process(self.process, sig)
        self.process = None

    def operator(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """`vswitch-agent --config <this node's> ...` run on this node (it reaches etcd)."""
        return subprocess.run(
            ["ip", "netns", "exec", self.netns, sys.executable, "-m", "agent.main",
             "--config", str(self.dir / "agent.yaml"), *argv],
            capture_output=True, text=True, cwd=REPO, check=False, timeout=60,
        )

    def add_pod(self) -> Pod:
        pod = Pod(unique("cp"), self)
        sh("ip", "netns", "add", pod.name)
        self.cluster.pods.append(pod)
        out = self.plugin("ADD", pod)
        if out.returncode != 0:
            raise RuntimeError(f"ADD {pod.name} on {self.name}: {out.stdout} {out.stderr}")
        pod.ips = [ip["address"].split("/")[0] for ip in json.loads(out.stdout)["ips"]]
        self.pods.append(pod)
        return pod

    def plugin(self, verb: str, pod: Pod) -> subprocess.CompletedProcess[str]:
        netconf = {"cniVersion": "1.1.0", "name": "cluster", "type": "vswitch-cni",
                   "agentSocket": self.socket, "stateDir": str(self.dir / "state"),
                   "timeoutSeconds": 20}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CNI_COMMAND": verb,
               "CNI_CONTAINERID": pod.name, "CNI_NETNS": pod.netns, "CNI_IFNAME": "eth0",
               "CNI_PATH": "/usr/lib/cni",
               "CNI_ARGS": f"K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod.name}"}
        return subprocess.run([str(tools.plugin())], input=json.dumps(netconf), env=env,
                              capture_output=True, text=True, check=False, timeout=60)

    def mesh_state(self) -> dict[str, list[str]]:
        """What this node's kernel holds for the mesh: routes (proto 118), FDB and neighbors
        of the VXLAN device, and our permanent fe80::2b:0:* next hops, as text lines."""
        def lines(*argv: str) -> list[str]:
            out = sh("ip", "-n", self.netns, *argv, check=False).stdout
            return sorted(line.strip() for line in out.splitlines() if line.strip())

        fdb = sh("ip", "netns", "exec", self.netns, "bridge", "fdb", "show", "dev", "vxlan-vsw",
                 check=False).stdout
        return {
            "routes": lines("-4", "route", "show", "proto", "118")
            + lines("-6", "route", "show", "proto", "118"),
            "fdb": sorted(x.strip() for x in fdb.splitlines() if " dst " in x),
            "neigh": [x for x in lines("neigh", "show", "nud", "permanent")
                      if "vxlan-vsw" in x or x.startswith("fe80::2b:")],
        }


class Cluster:
    """The fabric, etcd and the nodes; `close()` removes everything."""

    def __init__(self, workdir: Path, extra_config: dict[str, Any] | None = None) -> None:
        self.workdir = workdir
        self.extra_config = extra_config or {}
        self.fabric = unique("cfab")
        self.nodes: list[Node] = []
        self.pods: list[Pod] = []
        self.etcd: subprocess.Popen[bytes] | None = None
        self._next = 1

    def __enter__(self) -> Cluster:
        try:
            sh("ip", "netns", "add", self.fabric)
            # A fixed MAC: a bridge without one takes its ports' lowest MAC, which changes as
            # nodes join, and the nodes' ARP entries for etcd's address then point nowhere.
            sh("ip", "-n", self.fabric, "link", "add", "br0", "address", "02:00:c0:a8:10:fe",
               "type", "bridge")
            sh("ip", "-n", self.fabric, "addr", "add", f"{FABRIC_IP}/24", "dev", "br0")
            sh("ip", "-n", self.fabric, "link", "set", "br0", "up")
            sh("ip", "-n", self.fabric, "link", "set", "lo", "up")
            self.start_etcd()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- etcd -------------------------------------------------------------------------------

    def start_etcd(self) -> None:
        data = self.workdir / "etcd"
        with open(self.workdir / "etcd.log", "ab") as log:
            self.etcd = subprocess.Popen(
                ["ip", "netns", "exec", self.fabric, "/usr/bin/etcd", "--name", "fabric",
                 "--data-dir", str(data),
                 "--listen-client-urls", ETCD_URL, "--advertise-client-urls", ETCD_URL,
                 "--listen-peer-urls", f"http://{FABRIC_IP}:2380",
                 "--initial-advertise-peer-urls", f"http://{FABRIC_IP}:2380",
                 "--initial-cluster", f"fabric=http://{FABRIC_IP}:2380",
                 "--heartbeat-interval", "10", "--election-timeout", "100",
                 "--log-level", "error"],
                stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 20
        while not self._etcd_healthy():
            if self.etcd.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((self.workdir / "etcd.log").read_text()[-2000:])
            time.sleep(0.05)

    def _etcd_healthy(self) -> bool:
        def probe() -> bool:
            try:
                with urllib.request.urlopen(f"{ETCD_URL}/health", timeout=0.5) as resp:
                    return b'"true"' in resp.read()
            except OSError:
                return False

        return in_netns(self.fabric, probe)

    def stop_etcd(self) -> None:
        if self.etcd is not None:
            self.etcd.kill()  # a crash, not a clean shutdown; the data dir stays
            self.etcd.wait(timeout=10)
            self.etcd = None

    # ---- nodes ------------------------------------------------------------------------------

    def add_node(
        self, start: bool = True, via_env: bool = False, **extra: Any
    ) -> Node:
        index = self._next
        self._next += 1
        node = Node(self, index, f"node-{index}", unique("cnode"), f"192.168.16.{10 + index}",
                    via_env=via_env, extra=extra)
        self.nodes.append(node)
        peer = node.fabric_port
        sh("ip", "netns", "add", node.netns)
        sh("ip", "link", "add", "eth0", "netns", node.netns, "type", "veth",
           "peer", "name", peer, "netns", self.fabric)
        sh("ip", "-n", self.fabric, "link", "set", peer, "master", "br0", "up")
        sh("ip", "-n", node.netns, "addr", "add", f"{node.node_ip}/24", "dev", "eth0")
        sh("ip", "-n", node.netns, "link", "set", "eth0", "up")
        sh("ip", "-n", node.netns, "link", "set", "lo", "up")
        if start:
            node.start_agent()
        return node

    def remove_node_namespace(self, node: Node) -> None:
        node.stop_agent()
        end_processes(node.netns)
        for pod in node.pods:
            self._drop_pod(pod)
        node.pods.clear()
        sh("ip", "netns", "del", node.netns, check=False)
        self.nodes.remove(node)

    def _drop_pod(self, pod: Pod) -> None:
        sh("ip", "netns", "del", pod.name, check=False)
        if pod in self.pods:
            self.pods.remove(pod)

    def close(self) -> None:
        for node in list(self.nodes):
            for pod in node.pods:
                if node.process is not None and node.process.poll() is None:
                    node.plugin("DEL", pod)
            node.stop_agent()
        for pod in list(self.pods):
            self._drop_pod(pod)
        for node in self.nodes:
            end_processes(node.netns)
            sh("ip", "netns", "del", node.netns, check=False)
        self.nodes.clear()
        self.stop_etcd()
        sh("ip", "netns", "del", self.fabric, check=False)


def end_processes(netns: str) -> None:
    """Kills what still runs in a node namespace once its agent stopped (wireguard-go, which
    the agent leaves running over its restarts, as the kernel keeps its own WireGuard device):
    a process keeps a namespace alive after `ip netns del`."""
    for pid in sh("ip", "netns", "pids", netns, check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


def mesh_view(node: Node) -> dict[str, str]:
    """Node name -> mesh state as `node`'s agent reports it (GET /v1/nodes)."""
    status, body = node.get("/v1/nodes")
    if status != 200:
        return {}
    return {n["name"]: n.get("mesh", {}).get("state", "") for n in body["nodes"]}


def converged(nodes: list[Node]) -> bool:
    """True when every node's agent lists exactly `nodes`, every remote one programmed."""
    names = {n.name for n in nodes}
    for node in nodes:
        view = mesh_view(node)
        if set(view) != names:
            return False
        if any(state != "programmed" for name, state in view.items() if name != node.name):
            return False
    return True


def mentions(node: Node, other: Node, other_id: int) -> list[str]:
    """The mesh objects on `node` naming `other` (by node IP, VXLAN address or MAC, IPv6 next
    hop or pod subnet): what a removal must leave nothing of."""
    marks = {other.node_ip, f"192.168.30.{other_id}", f"12:2b:00:00:00:{other_id:02x}",
             f"fe80::2b:0:{other_id:x}", f"10.1.{other_id}.0/24", f"fd00:10:0:{other_id:x}::/64"}
    return [line for lines in node.mesh_state().values() for line in lines
            if marks & set(line.split())]


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Polls `check` until true; returns the seconds it took. Raises after `timeout`."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.1)
    return time.monotonic() - started

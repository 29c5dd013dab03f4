"""The deployed tier as the checks see it: the nodes, the workload's pods and Services, and the
ways to call them: from a pod (`kubectl exec`, the pod's own `nc`), from a node (its namespace),
from a pod's namespace entered from here (long-running traffic), and the agents' REST.

Every call is a real exchange (agnhost `netexec` answers `/hostname` with the pod's name, over
HTTP and over UDP), so a check sees who answered, not only that a connection opened.
"""

from __future__ import annotations

import contextlib
import glob
import json
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from testbed.netns import entered
from tests.k8s_tier import deploy
from tests.k8s_tier.deploy import APP, HAIRPIN_LABEL, NAMESPACE, NODE_LABEL, PORT, UDP_PORT
from tests.k8s_tier.kube import Kube, KubeError, wait_for

# The outside (an upstream network): a server on TEST-NET-3, and a veth to every node with a /30
# of TEST-NET-2 each (node i: .4i+1 on the node, .4i+2 outside).
OUTSIDE_IP = "203.0.113.1"
AGENT_REST_PORT = 9999  # k8s/base/configmap.yaml: HTTPAddress
# `nc` that closes its sending side once its input ends (OpenBSD's nc, as in the upstream
# agnhost image, needs -N for that; busybox's does it by itself and has no -N).
NC = "nc $(nc -h 2>&1 | grep -q 'after EOF on stdin' && echo -N) -w 5"
REQUEST = r"printf 'GET {path} HTTP/1.0\r\n\r\n'"
# No proxy from the environment: the tier talks only to the nodes' own addresses.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# What the kernel dataplane's agent leaves on a node by design (pods stay reachable while it is
# away): the pod gateway (GatewayInterface) and the mesh's VXLAN device (VXLANInterface). Another
# dataplane deployed next routes the same subnets elsewhere.
KERNEL_LEFTOVERS = ("vswitch0", "vxlan-vsw")


def outside_addresses(index: int) -> tuple[str, str]:
    """(node end, outside end) of the veth between node `index` (0-based) and the outside."""
    return f"198.51.100.{4 * index + 1}", f"198.51.100.{4 * index + 2}"


@dataclass(frozen=True)
class Node:
    """A Kubernetes node of the tier and the network namespace it runs in ("": the test's)."""

    name: str
    ip: str
    netns: str
    index: int  # 1, 2: its place in the tier's node list (the pods' NODE_LABEL)

    def cmd(self, *argv: str, check: bool = True) -> bool:
        """A command in the node's network namespace; raises with its stderr when it fails and
        `check` is set, else says whether it succeeded."""
        prefix = ["nsenter", f"--net={self.netns}"] if self.netns else []
        r = subprocess.run([*prefix, *argv], capture_output=True, text=True, check=False)
        if r.returncode != 0 and check:
            raise AssertionError(f"{self.name}: {' '.join(argv)}: {r.stderr.strip()}")
        return r.returncode == 0

    def get(self, host: str, port: int, path: str = "/hostname") -> str:
        """GET `path` from the node's network namespace; the body."""
        ctx = entered(self.netns) if self.netns else contextlib.nullcontext()
        with ctx, _OPENER.open(f"http://{host}:{port}{path}", timeout=10) as answer:
            body: bytes = answer.read()
        return body.decode().strip()

    def agent(self, path: str) -> Any:
        """The node's agent's REST answer (JSON) for `path`."""
        return json.loads(self.get(self.ip, AGENT_REST_PORT, path))


def find_nodes(kube: Kube, netns_paths: list[str]) -> list[Node]:
    """The cluster's nodes the tier reaches: for each namespace, the node whose InternalIP is
    one of its addresses."""
    by_ip = {}
    for item in kube.get("nodes")["items"]:
        for a in item["status"]["addresses"]:
            if a["type"] == "InternalIP":
                by_ip[a["address"]] = item["metadata"]["name"]
    nodes = []
    for i, path in enumerate(netns_paths, start=1):
        prefix = ["nsenter", f"--net={path}"] if path else []
        out = subprocess.run([*prefix, "ip", "-j", "-4", "addr", "show"], capture_output=True,
                             text=True, check=True).stdout
        held = [a["local"] for link in json.loads(out) for a in link.get("addr_info", [])]
        ip = next((a for a in held if a in by_ip), None)
        if ip is None:
            raise KubeError(f"no node of the cluster has an address in {path or 'this namespace'}"
                            f" (nodes: {by_ip}; addresses there: {held})")
        nodes.append(Node(by_ip[ip], ip, path, i))
    return nodes


def container_netns(container_id: str) -> str:
    """The network namespace of a running container (`containerd://<id>`, as the pod status
    names it), as /proc/<pid>/ns/net of one of its processes: found by the container ID in the
    process's cgroup, so it needs no runtime client and works from any mount namespace."""
    cid = container_id.split("://", 1)[-1]
    for cgroup in glob.glob("/proc/[0-9]*/cgroup"):
        with contextlib.suppress(OSError), open(cgroup) as f:
            if cid in f.read():
                return cgroup.removesuffix("cgroup") + "ns/net"
    raise KubeError(f"no process of container {cid} found")


@dataclass(frozen=True)
class Pod:
    name: str
    ip: str
    node: str


@dataclass
class Tier:
    kube: Kube
    dataplane: str
    nodes: list[Node]
    pods: dict[str, Pod]  # pod name -> pod
    cluster_ip: str
    node_port: int
    backends: dict[str, tuple[str, int]]  # node name -> ClusterIP, NodePort of its pods only
    hairpin: dict[str, tuple[str, str]]  # node name -> hairpin Service IP, its one backend

    @classmethod
    def discover(cls, kube: Kube, dataplane: str, nodes: list[Node]) -> Tier:
        """Reads the workload; labels each pod with its node's index and one pod per node as
        that node's `hairpin` backend, and waits for the Services' endpoints to say so."""
        pods = {p["metadata"]["name"]: Pod(p["metadata"]["name"], p["status"]["podIP"],
                                           p["spec"]["nodeName"])
                for p in kube.get("pods", namespace=NAMESPACE, selector=f"app={APP}")["items"]}
        services = {s["metadata"]["name"]: s["spec"]
                    for s in kube.get("services", namespace=NAMESPACE)["items"]}
        backends, hairpin = {}, {}
        for node in nodes:
            mine = sorted(p.name for p in pods.values() if p.node == node.name)
            for name in mine:
                kube.run("label", "--overwrite", f"--namespace={NAMESPACE}", "pod", name,
                         f"{NODE_LABEL}={node.index}")
            spec = services[f"backends-{node.index}"]
            backends[node.name] = (spec["clusterIP"], spec["ports"][0]["nodePort"])
            _wait_endpoints(kube, f"backends-{node.index}", len(mine))
            if mine:
                kube.run("label", f"--namespace={NAMESPACE}", "pod", mine[0],
                         f"{HAIRPIN_LABEL}={node.index}")
                hairpin[node.name] = (services[f"hairpin-{node.index}"]["clusterIP"], mine[0])
                _wait_endpoints(kube, f"hairpin-{node.index}", 1)
        _wait_endpoints(kube, "web", len(pods))
        return cls(kube, dataplane, nodes, pods, services["web"]["clusterIP"],
                   services["web-nodeport"]["ports"][0]["nodePort"], backends, hairpin)

    def on(self, node: Node) -> list[str]:
        """The names of the workload's pods on `node`."""
        return sorted(p.name for p in self.pods.values() if p.node == node.name)

    def from_pod(self, pod: str, host: str, port: int = PORT, path: str = "/hostname") -> str:
        """GET `path` from inside `pod`; the answer's body."""
        request = REQUEST.format(path=path)
        out = self.kube.exec(NAMESPACE, pod, f"{request} | {NC} {host} {port}")
        # kubectl's output was read as text: universal newlines made each CRLF a LF.
        head, _, body = out.replace("\r\n", "\n").partition("\n\n")
        assert head.startswith("HTTP/1.") and " 200 " in head, (
            f"{pod} -> {host}:{port}: no HTTP answer ({out!r})")
        return body.strip()

    def udp_from_pod(self, pod: str, host: str, port: int = UDP_PORT) -> list[str]:
        """A UDP exchange from `pod` (its netexec's /dial sends `hostname` in one datagram and
        waits for the answer); the answers."""
        answer = json.loads(self.from_pod(
            pod, "127.0.0.1", PORT,
            f"/dial?request=hostname&protocol=udp&host={host}&port={port}&tries=1"))
        return list(answer.get("responses") or [])

    def pod_connects(self, pod: str, host: str, port: int) -> None:
        """A TCP connection from inside `pod` (for servers that are not HTTP, e.g. the
        apiserver); raises with agnhost's message when it fails."""
        self.kube.exec(NAMESPACE, pod, f"/agnhost connect --timeout=5s {host}:{port}")

    def pod_netns(self, pod: str) -> str:
        """The pod's network namespace, entered from here (see container_netns)."""
        status = self.kube.get("pod", pod, NAMESPACE)["status"]
        return container_netns(status["containerStatuses"][0]["containerID"])

    def pod_records(self, node: Node) -> list[dict[str, Any]]:
        """The node's agent's records of the workload's pods (REST /v1/pods)."""
        return list(node.agent(f"/v1/pods?namespace={NAMESPACE}")["pods"])

    def allocations(self, node: Node) -> dict[str, Any]:
        """The node's agent's view of its pod addresses (REST /v1/allocations)."""
        return dict(node.agent("/v1/allocations")["allocations"])


def _wait_endpoints(kube: Kube, service: str, count: int) -> None:
    """Until the Service's Endpoints hold `count` ready addresses."""
    def ready() -> bool:
        subsets = kube.get("endpoints", service, NAMESPACE).get("subsets") or []
        return sum(len(s.get("addresses", [])) for s in subsets) == count

    wait_for(f"{count} endpoints of the {service} Service", ready)


@contextlib.contextmanager
def deployed(kube: Kube, nodes: list[Node], dataplane: str, vpp_socket: str, etcd_image: str,
             pod_image: str, vpp_image: str = "") -> Iterator[Tier]:
    """The project's manifests with `Dataplane: <dataplane>`, then the workload; torn down in
    reverse order so every pod's CNI DEL reaches a running agent."""
    system = deploy.system(dataplane, vpp_socket, etcd_image, vpp_image)
    work = deploy.workload(pod_image, [n.name for n in nodes])
    with ExitStack() as undo:
        # Every undo step runs even when an earlier one fails (ExitStack chains the errors).
        if dataplane == "kernel":
            for node in nodes:
                for link in KERNEL_LEFTOVERS:
                    undo.callback(node.cmd, "ip", "link", "del", link, check=False)
        undo.callback(kube.delete, [d for d in system if d["kind"] in ("DaemonSet", "ConfigMap")])
        kube.apply(system)
        kube.rollout("statefulset", "vswitch-etcd", "kube-system")
        kube.rollout("daemonset", "vswitch-agent", "kube-system")
        undo.callback(kube.delete, work)
        kube.apply(work)
        kube.rollout("deployment", deploy.APP, deploy.NAMESPACE, timeout=180)
        yield Tier.discover(kube, dataplane, nodes)

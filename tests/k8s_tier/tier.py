"""The deployed tier as the checks see it: the node, the workload's pods and Services, and the ways
to call them: from a pod (`kubectl exec`, the pod's own `nc`), from the node (its namespace) and
the agent's REST.

Every call is a real HTTP exchange (agnhost `netexec` answers `/hostname` with the pod's name),
so a check sees who answered, not only that a connection opened.
"""

from __future__ import annotations

import contextlib
import json
import urllib.request
from dataclasses import dataclass
from typing import Any

from testbed.netns import entered
from tests.k8s_tier.deploy import APP, NAMESPACE, PORT
from tests.k8s_tier.kube import Kube, wait_for

OUTSIDE_NODE_IP = "198.51.100.1"  # TEST-NET-2: the node's end of the veth to the outside
OUTSIDE_IP = "198.51.100.2"
AGENT_REST_PORT = 9999  # k8s/base/configmap.yaml: HTTPAddress
REQUEST = r"printf 'GET /hostname HTTP/1.0\r\n\r\n'"
# No proxy from the environment: the tier talks only to the node's own addresses.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class Tier:
    kube: Kube
    dataplane: str
    node_netns: str
    node_ip: str
    pods: dict[str, str]  # pod name -> pod IP
    cluster_ip: str
    node_port: int
    hairpin_ip: str
    hairpin_pod: str

    @classmethod
    def discover(cls, kube: Kube, dataplane: str, node_netns: str) -> Tier:
        """Reads the node and the workload; labels one pod as the `hairpin` Service's backend."""
        node = kube.get("nodes")["items"][0]
        node_ip = next(a["address"] for a in node["status"]["addresses"]
                       if a["type"] == "InternalIP")
        pods = {p["metadata"]["name"]: p["status"]["podIP"] for p in
                kube.get("pods", namespace=NAMESPACE, selector=f"app={APP}")["items"]}
        hairpin_pod = sorted(pods)[0]
        kube.run("label", f"--namespace={NAMESPACE}", "pod", hairpin_pod, "hairpin=yes")

        def endpoints(name: str, count: int) -> bool:
            subsets = kube.get("endpoints", name, NAMESPACE).get("subsets") or []
            return sum(len(s.get("addresses", [])) for s in subsets) == count

        wait_for("the web Service's endpoints", lambda: endpoints("web", len(pods)))
        wait_for("the hairpin Service's endpoint", lambda: endpoints("hairpin", 1))
        services = {s["metadata"]["name"]: s["spec"]
                    for s in kube.get("services", namespace=NAMESPACE)["items"]}
        return cls(kube, dataplane, node_netns, node_ip, pods,
                   services["web"]["clusterIP"], services["web-nodeport"]["ports"][0]["nodePort"],
                   services["hairpin"]["clusterIP"], hairpin_pod)

    def from_pod(self, pod: str, host: str, port: int = PORT) -> str:
        """GET /hostname from inside `pod`; the answer's body."""
        out = self.kube.exec(NAMESPACE, pod, f"{REQUEST} | nc -w 5 {host} {port}")
        # kubectl's output was read as text: universal newlines made each CRLF a LF.
        head, _, body = out.replace("\r\n", "\n").partition("\n\n")
        assert head.startswith("HTTP/1.") and " 200 " in head, (
            f"{pod} -> {host}:{port}: no HTTP answer ({out!r})")
        return body.strip()

    def pod_connects(self, pod: str, host: str, port: int) -> None:
        """A TCP connection from inside `pod` (for servers that are not HTTP, e.g. the
        apiserver); raises with agnhost's message when it fails."""
        self.kube.exec(NAMESPACE, pod, f"/agnhost connect --timeout=5s {host}:{port}")

    def from_node(self, host: str, port: int, path: str = "/hostname") -> str:
        """GET `path` from the node's network namespace; the body."""
        ctx = entered(self.node_netns) if self.node_netns else contextlib.nullcontext()
        with ctx, _OPENER.open(f"http://{host}:{port}{path}", timeout=10) as answer:
            body: bytes = answer.read()
        return body.decode().strip()

    def pod_records(self) -> list[dict[str, Any]]:
        """The agent's records of the workload's pods (REST /v1/pods)."""
        data = json.loads(self.from_node(self.node_ip, AGENT_REST_PORT,
                                         f"/v1/pods?namespace={NAMESPACE}"))
        return list(data["pods"])

    def allocations(self) -> dict[str, Any]:
        """The agent's view of this node's pod addresses (REST /v1/allocations)."""
        data: dict[str, Any] = json.loads(
            self.from_node(self.node_ip, AGENT_REST_PORT, "/v1/allocations"))
        return dict(data["allocations"])

"""The test as kubelet for one node of a real kube-apiserver: Pod objects, the real plugin's ADD
and DEL (each pod in a namespace of its own, all removed at the end), the pods' status IPs.
No kubelet runs in these tests; the agent learns a pod's labels from the API and its address
from the CNI ADD, as on a real node."""

from __future__ import annotations

import time
from contextlib import ExitStack

from testbed.agent import AgentHandle, net_config, run_plugin
from testbed.kube import KubeApiServer
from testbed.netns import named_netns


class Pods:
    """Pods of namespace `namespace` on `node`; `stack` DELs them and removes their
    namespaces when it closes."""

    def __init__(self, api: KubeApiServer, agent: AgentHandle, node: str, stack: ExitStack,
                 namespace: str) -> None:
        self.api, self.agent, self.node, self.stack = api, agent, node, stack
        self.namespace = namespace
        self.netns: dict[str, str] = {}
        self.ip: dict[str, str] = {}

    def create(self, name: str, labels: dict[str, str]) -> None:
        self.api.must("POST", f"/api/v1/namespaces/{self.namespace}/pods", {
            "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": self.node, "containers": [{"name": "c", "image": "none"}]}})

    def add(self, name: str) -> str:
        """The plugin's ADD, as the runtime runs it; returns the pod's first address."""
        netns = self.stack.enter_context(named_netns("tpol"))
        cid = f"c-{name}-{int(time.time() * 1000)}"
        result = run_plugin("ADD", net_config(self.agent), container_id=cid, netns=netns,
                            args=f"K8S_POD_NAMESPACE={self.namespace};K8S_POD_NAME={name}")
        assert result.returncode == 0, result.stderr + result.stdout
        self.stack.callback(self._delete, cid, netns)
        self.netns[name] = netns
        self.ip[name] = result.json["ips"][0]["address"].split("/")[0]
        return self.ip[name]

    def _delete(self, cid: str, netns: str) -> None:
        result = run_plugin("DEL", net_config(self.agent), container_id=cid, netns=netns)
        assert result.returncode == 0, result.stderr

    def report_ip(self, name: str) -> None:
        """What the kubelet does once the sandbox runs: the pod's IP in its status."""
        ip = self.ip[name]
        self.api.must("PATCH", f"/api/v1/namespaces/{self.namespace}/pods/{name}/status",
                      {"status": {"podIP": ip, "podIPs": [{"ip": ip}], "phase": "Running"}},
                      content_type="application/merge-patch+json")

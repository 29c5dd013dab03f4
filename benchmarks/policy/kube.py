"""The Kubernetes side of the NetworkPolicy benchmarks: a real kube-apiserver with the agent's
shipped role, a synthetic cluster in it, and a benchmark playing the kubelet of one node.

- `kube_api()`: an etcd of its own (watch progress every second, as tests/kube runs it) and
  testbed.kube's KubeApiServer (VSWITCH_TEST_KUBE_APISERVER), the ClusterRole of
  k8s/base/rbac.yaml bound to the token user `USER`; both removed at the end.
- `populate(api, pods, policies)`: benchmarks.policy.compiler's synthetic cluster, cut to size,
  as API objects: namespaces, Pods on other nodes with their status IPs, NetworkPolicies. They
  make the agent's compiles realistic (peers resolved from every pod of the cluster).
- `Kubelet`: Pod objects on the agent's node, the real plugin's ADD with K8S_POD_NAMESPACE /
  K8S_POD_NAME, the pod's IP written to its status afterwards, DEL; `close()` DELs every pod
  it added and removes their namespaces, also after a failure.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.core.harness import Namespaces
from benchmarks.core.kwok import NS, POLICIES
from benchmarks.policy.compiler import cluster
from testbed.agent import AgentHandle, net_config, run_plugin
from testbed.kube import KubeApiServer


def populate(api: KubeApiServer, n_pods: int, n_policies: int) -> dict[str, int]:
    """The synthetic cluster's first `n_pods` pods (other nodes) and `n_policies` policies."""
    namespaces, pods, policies = cluster(n_pods, n_policies)
    for ns in namespaces:
        status, body = api.request("POST", "/api/v1/namespaces", ns)
        if status not in (201, 409):  # kube-system exists already
            raise RuntimeError(f"namespace {ns['metadata']['name']}: {status} {body}")
    for pod in pods:
        meta = pod["metadata"]
        spec = {**pod["spec"], "containers": [{"name": f"c{i}", **c, "image": "none"}
                                              for i, c in enumerate(pod["spec"]["containers"])]}
        api.must("POST", f"/api/v1/namespaces/{meta['namespace']}/pods",
                 {"metadata": meta, "spec": spec})
        ips = pod["status"].get("podIPs") or [{"ip": pod["status"]["podIP"]}]
        _status(api, meta["namespace"], meta["name"], ips)
    for policy in policies:
        api.must("POST", POLICIES.format(ns=policy["metadata"]["namespace"]), policy)
    return {"pods": len(pods), "namespaces": len(namespaces), "policies": len(policies)}


def _status(api: KubeApiServer, ns: str, name: str, ips: list[dict[str, str]]) -> None:
    api.must("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status",
             {"status": {"phase": "Running", "podIP": ips[0]["ip"], "podIPs": ips}},
             content_type="application/merge-patch+json")


@dataclass
class Pod:
    name: str
    netns: str
    container_id: str
    ip: str


class Kubelet:
    """One node's pods, as the kubelet and the runtime make them (see the module's docstring)."""

    def __init__(self, api: KubeApiServer, agent: AgentHandle) -> None:
        self.api, self.agent = api, agent
        self.namespaces = Namespaces("vpe")
        self.pods: dict[str, Pod] = {}

    def add(self, name: str, labels: dict[str, str]) -> tuple[Pod, float]:
        """Pod object, ADD (timed: the plugin's exec, what a runtime waits for), status IP."""
        self.api.must("POST", f"/api/v1/namespaces/{NS}/pods", {
            "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": self.agent.config["NodeName"],
                     "containers": [{"name": "c", "image": "none"}]}})
        netns = str(self.namespaces.create())
        cid = f"{name}-{secrets.token_hex(8)}"
        start = time.perf_counter()
        result = run_plugin("ADD", net_config(self.agent), container_id=cid, netns=netns,
                            args=f"IgnoreUnknown=1;K8S_POD_NAMESPACE={NS};K8S_POD_NAME={name}")
        took = (time.perf_counter() - start) * 1000
        if result.returncode != 0:
            self.namespaces.remove(Path(netns))
            self._delete_object(name)
            raise RuntimeError(f"ADD {name}: {result.stdout} {result.stderr}")
        pod = Pod(name, netns, cid, result.json["ips"][0]["address"].split("/")[0])
        self.pods[name] = pod
        _status(self.api, NS, name, [{"ip": pod.ip}])
        return pod, took

    def delete(self, name: str) -> None:
        pod = self.pods.pop(name)
        try:
            result = run_plugin("DEL", net_config(self.agent), container_id=pod.container_id,
                                netns=pod.netns)
            if result.returncode != 0:
                raise RuntimeError(f"DEL {name}: {result.stdout} {result.stderr}")
        finally:
            self.namespaces.remove(Path(pod.netns))
            self._delete_object(name)

    def _delete_object(self, name: str) -> None:
        self.api.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}?gracePeriodSeconds=0")

    def close(self) -> None:
        try:
            for name in list(self.pods):
                with contextlib.suppress(Exception):  # the rest still goes
                    self.delete(name)
        finally:
            self.namespaces.close()


def create_policy(api: KubeApiServer, name: str, spec: dict[str, Any]) -> None:
    api.must("POST", POLICIES.format(ns=NS), {"metadata": {"name": name}, "spec": spec})


def delete_policy(api: KubeApiServer, name: str) -> None:
    api.must("DELETE", POLICIES.format(ns=NS) + f"/{name}")

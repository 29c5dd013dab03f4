"""What the k8s tier puts on the cluster: the project's own manifests (k8s/base) with this node's
config, and the test workload (a Deployment of agnhost `netexec` pods and its Services).

The manifests are k8s/base's kustomization (what `kubectl apply -k k8s/base/` installs), rendered
by the same kustomize the manifest tests use (tests/k8s/kustomize: Debian's, from `make setup`;
not the cluster's kubectl), and changed only where the node differs from the defaults they ship
with, each change named here:
- the agent's `agent.yaml`: `Dataplane` (and, for VPP, `UseTAPInterfaces: false` and the API
  socket's file name);
- the DaemonSet's `/run/vpp` hostPath: the directory of the VPP socket the tier was given;
- the etcd image, when VSWITCH_TEST_K8S_ETCD_IMAGE names a local one (no registry here).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml

from tests.k8s import kustomize
from tests.k8s_tier.kube import Doc

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "vswitch-tier"
APP = "web"
REPLICAS = 3
PORT = 8080


def manifests() -> list[Doc]:
    """k8s/base as `kubectl apply -k k8s/base/` sends it: the kustomization rendered."""
    return kustomize.render(ROOT / "k8s" / "base")


def for_node(docs: list[Doc], dataplane: str, vpp_socket: str, etcd_image: str) -> list[Doc]:
    """The manifests with this node's config (see the module docstring)."""
    out = copy.deepcopy(docs)
    for doc in out:
        if doc["kind"] == "ConfigMap":
            doc["data"]["agent.yaml"] = _agent_config(doc["data"]["agent.yaml"], dataplane,
                                                      vpp_socket)
        elif doc["kind"] == "DaemonSet" and vpp_socket:
            for vol in doc["spec"]["template"]["spec"]["volumes"]:
                if vol["name"] == "vpp-api":
                    vol["hostPath"]["path"] = os.path.dirname(vpp_socket)
        elif doc["kind"] == "StatefulSet" and etcd_image:
            for c in doc["spec"]["template"]["spec"]["containers"]:
                c["image"] = etcd_image
    return out


def _agent_config(text: str, dataplane: str, vpp_socket: str) -> str:
    config: dict[str, Any] = yaml.safe_load(text)
    config["Dataplane"] = dataplane
    if dataplane == "vpp":
        config["UseTAPInterfaces"] = False
        config["VPPAPISocket"] = f"/run/vpp/{os.path.basename(vpp_socket)}"
    return yaml.safe_dump(config, sort_keys=False)


def workload(image: str) -> list[Doc]:
    """The namespace, the Deployment and its Services: ClusterIP, NodePort, and `hairpin`,
    which selects only the pod labelled hairpin=yes (so a pod calling it reaches itself)."""
    labels = {"app": APP}
    container = {
        "name": "netexec", "image": image, "args": ["netexec", f"--http-port={PORT}"],
        "ports": [{"containerPort": PORT}],
        "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 2},
    }
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": APP, "namespace": NAMESPACE},
        "spec": {"replicas": REPLICAS, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"terminationGracePeriodSeconds": 1,
                                       "containers": [container]}}},
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        deployment,
        _service("web", labels, "ClusterIP"),
        _service("web-nodeport", labels, "NodePort"),
        _service("hairpin", {**labels, "hairpin": "yes"}, "ClusterIP"),
    ]


def _service(name: str, selector: dict[str, str], kind: str) -> Doc:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"type": kind, "selector": selector,
                 "ports": [{"port": 80, "targetPort": PORT, "protocol": "TCP"}]},
    }

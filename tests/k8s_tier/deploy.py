"""What the k8s tier puts on the cluster: the project's own manifests (k8s/base) with the nodes'
config, and the test workload (a Deployment of agnhost `netexec` pods and its Services).

The manifests are k8s/base's kustomization (what `kubectl apply -k k8s/base/` installs), rendered
by the same kustomize the manifest tests use (tests/k8s/kustomize: Debian's, from `make setup`;
not the cluster's kubectl), and changed only where the node differs from the defaults they ship
with, each change named here:
- the agent's `agent.yaml`: `Dataplane` (for the kernel, `ServiceTranslation: kube-proxy`, its
  only choice; for VPP, `UseTAPInterfaces: false`, with it `ExpediteKernelRcu: true` as the
  config map's comment advises, the API socket's file name, and `ServiceTranslation` when
  VSWITCH_TEST_K8S_SERVICE_TRANSLATION names one, else the config map's), and
  `NodeRemovalGrace` short enough for a test to wait it out;
- the DaemonSet's `/run/vpp` hostPath: the directory of the VPP socket the tier was given; when
  that path holds `{node}` (one VPP per node, e.g. `/run/vpp-nodes/{node}/api.sock`), the
  hostPath is the part before it and the agent's mount takes the node's own subdirectory
  (`subPathExpr: $(NODE_NAME)`, the node name the DaemonSet already gives the agent);
- the etcd image, when VSWITCH_TEST_K8S_ETCD_IMAGE names a local one (no registry here).

`python -m tests.k8s_tier.deploy apply|delete --dataplane kernel|vpp` does the same by hand (for
the upstream e2e tests, docs/k8s-tier.md), with the tier's environment.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.k8s import kustomize
from tests.k8s_tier.kube import Doc, Kube

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "vswitch-tier"
APP = "web"
REPLICAS = 4
PORT = 8080
UDP_PORT = 8081
NODE_PLACEHOLDER = "{node}"
NODE_REMOVAL_GRACE = 20  # seconds (the shipped default: 300)
# who translates ClusterIPs on VPP nodes: "" (the config map's: vpp), kube-proxy or vpp
SERVICE_TRANSLATION = os.environ.get("VSWITCH_TEST_K8S_SERVICE_TRANSLATION", "")
# Labels the tier puts on pods after they run: the node they run on (its index in the tier's
# node list, "1" or "2"), and one pod per node as the backend of that node's hairpin Service.
NODE_LABEL = "tier-node"
HAIRPIN_LABEL = "hairpin"


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
            _vpp_volume(doc["spec"]["template"]["spec"], vpp_socket)
        elif doc["kind"] == "StatefulSet" and etcd_image:
            for c in doc["spec"]["template"]["spec"]["containers"]:
                c["image"] = etcd_image
    return out


def _vpp_volume(pod: Doc, vpp_socket: str) -> None:
    """The `vpp-api` hostPath: the socket's directory, or with `{node}` the node's own below it."""
    directory = os.path.dirname(vpp_socket)
    head, placeholder, tail = directory.partition(NODE_PLACEHOLDER)
    for vol in pod["volumes"]:
        if vol["name"] == "vpp-api":
            vol["hostPath"]["path"] = head.rstrip("/") if placeholder else directory
    if not placeholder:
        return
    for c in pod["containers"]:
        for mount in c["volumeMounts"]:
            if mount["name"] == "vpp-api":
                mount["subPathExpr"] = "$(NODE_NAME)" + tail


def _agent_config(text: str, dataplane: str, vpp_socket: str) -> str:
    config: dict[str, Any] = yaml.safe_load(text)
    config["Dataplane"] = dataplane
    config["NodeRemovalGrace"] = NODE_REMOVAL_GRACE
    if dataplane == "kernel":
        config["ServiceTranslation"] = "kube-proxy"
    if dataplane == "vpp":
        config["UseTAPInterfaces"] = False
        config["ExpediteKernelRcu"] = True
        if SERVICE_TRANSLATION:
            config["ServiceTranslation"] = SERVICE_TRANSLATION
        if vpp_socket:  # a VPP on the node; else the overlay's own VPP and socket
            config["VPPAPISocket"] = f"/run/vpp/{os.path.basename(vpp_socket)}"
    return yaml.safe_dump(config, sort_keys=False)


def service_translation(dataplane: str) -> str:
    """Who translates ClusterIPs for pods on the tier's `dataplane` nodes."""
    config = next(d for d in manifests() if d["kind"] == "ConfigMap")["data"]["agent.yaml"]
    return str(yaml.safe_load(_agent_config(config, dataplane, ""))["ServiceTranslation"])


def workload(image: str, nodes: list[str]) -> list[Doc]:
    """The namespace, the Deployment and its Services.

    The Deployment's pods run only on the tier's `nodes` and are spread evenly over them
    (a cordoned node does not count: `nodeTaintsPolicy: Honor`, so a drained node's pods find a
    place on the others). Its netexec answers HTTP on PORT and UDP on UDP_PORT. Services: `web`
    (ClusterIP) and `web-nodeport` (NodePort) over every pod; per node index i (1, 2):
    `backends-i` (NodePort) over the pods on node i, and `hairpin-i` (ClusterIP) over one pod
    on node i only (so that pod, calling it, reaches itself)."""
    labels = {"app": APP}
    container = {
        "name": "netexec", "image": image,
        "args": ["netexec", f"--http-port={PORT}", f"--udp-port={UDP_PORT}"],
        "ports": [{"containerPort": PORT, "name": "http"},
                  {"containerPort": UDP_PORT, "protocol": "UDP", "name": "udp"}],
        "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 2},
    }
    placement = {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}]}}},
        "topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule", "nodeTaintsPolicy": "Honor",
            "labelSelector": {"matchLabels": labels}}],
    }
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": APP, "namespace": NAMESPACE},
        "spec": {"replicas": REPLICAS, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"terminationGracePeriodSeconds": 1, **placement,
                                       "containers": [container]}}},
    }
    per_node = []
    for i in range(1, len(nodes) + 1):
        per_node += [_service(f"backends-{i}", {**labels, NODE_LABEL: str(i)}, "NodePort"),
                     _service(f"hairpin-{i}", {**labels, HAIRPIN_LABEL: str(i)}, "ClusterIP")]
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        deployment,
        _service("web", labels, "ClusterIP"),
        _service("web-nodeport", labels, "NodePort"),
        *per_node,
    ]


def _service(name: str, selector: dict[str, str], kind: str) -> Doc:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"type": kind, "selector": selector,
                 "ports": [{"port": 80, "targetPort": PORT, "protocol": "TCP"}]},
    }


def system(dataplane: str, vpp_socket: str, etcd_image: str, vpp_image: str = "") -> list[Doc]:
    """k8s/base with the nodes' config for `dataplane`; with `vpp_image` and `Dataplane: vpp`,
    the VPP overlay as shipped (k8s/overlays/vpp, VPP in the vswitch pod) with that image."""
    if dataplane == "vpp" and vpp_image:
        return vpp_overlay(vpp_image, etcd_image)
    return for_node(manifests(), dataplane, vpp_socket if dataplane == "vpp" else "",
                    etcd_image)


def vpp_overlay(vpp_image: str, etcd_image: str) -> list[Doc]:
    """k8s/overlays/vpp as `kubectl apply -k` sends it, changed where this machine differs: the
    VPP container's image (the overlay's Containerfile installs FD.io's packages, which cannot
    be fetched here), `UseTAPInterfaces: false` (no /dev/vhost-net in this kernel), the short
    NodeRemovalGrace, the etcd image."""
    docs = for_node(kustomize.render(ROOT / "k8s" / "overlays" / "vpp"), "vpp", "", etcd_image)
    for doc in docs:
        if doc["kind"] == "DaemonSet":
            for c in doc["spec"]["template"]["spec"]["containers"]:
                if c["name"] == "vpp":
                    c["image"] = vpp_image
    return docs


def main(argv: list[str] | None = None) -> int:
    """`apply`: k8s/base with the nodes' config, and waits for etcd and the agents; `delete`:
    removes the agent (DaemonSet, ConfigMap) again, and for the kernel dataplane what its agent
    leaves on the nodes (as the tier does before the VPP run). The cluster, its nodes and the VPP
    socket come from the tier's environment (conftest.py); this is how the upstream e2e tests
    get the project. Without the kustomize of `make setup` it stops before touching the cluster,
    saying so."""
    from tests.k8s_tier import conftest  # the tier's environment, read once
    from tests.k8s_tier.tier import find_nodes

    parser = argparse.ArgumentParser(prog="python -m tests.k8s_tier.deploy")
    parser.add_argument("action", choices=["apply", "delete"])
    parser.add_argument("--dataplane", choices=["kernel", "vpp"], required=True)
    args = parser.parse_args(argv)
    try:  # both actions render k8s/base first; a traceback would hide what to do
        kustomize.binary()
    except kustomize.KustomizeError as e:
        print(e, file=sys.stderr)
        return 2
    if not conftest.KUBECONFIG:
        print("VSWITCH_TEST_KUBECONFIG is not set", file=sys.stderr)
        return 2
    if args.dataplane == "vpp" and not (conftest.VPP_SOCKET or conftest.VPP_IMAGE):
        print("neither VSWITCH_TEST_VPP_SOCKET nor VSWITCH_TEST_K8S_VPP_IMAGE is set",
              file=sys.stderr)
        return 2
    kube = Kube(conftest.KUBECTL, conftest.KUBECONFIG, conftest.NODE_NETNS)
    docs = system(args.dataplane, conftest.VPP_SOCKET, conftest.ETCD_IMAGE, conftest.VPP_IMAGE)
    if args.action == "delete":
        kube.delete([d for d in docs if d["kind"] in ("DaemonSet", "ConfigMap")])
        if args.dataplane == "kernel":
            paths = [conftest.NODE_NETNS, *([conftest.NODE2_NETNS] if conftest.NODE2_NETNS else [])]
            for node in find_nodes(kube, paths):
                for link in conftest.KERNEL_LEFTOVERS:
                    node.cmd("ip", "link", "del", link, check=False)
        return 0
    kube.apply(docs)
    kube.rollout("statefulset", "vswitch-etcd", "kube-system")
    kube.rollout("daemonset", "vswitch-agent", "kube-system")
    return 0


if __name__ == "__main__":
    sys.exit(main())

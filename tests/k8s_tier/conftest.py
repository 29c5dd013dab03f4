"""Fixtures of the k8s tier: the project deployed on a real cluster once per dataplane, the test
workload on it, and an "outside" network for egress; all removed again at the end of the module,
also when a step fails.

Environment (the tier skips without the first):
- VSWITCH_TEST_KUBECONFIG: the cluster's kubeconfig (one node; its images imported, see
  docs/k8s-tier.md);
- VSWITCH_TEST_K8S_NODE_NETNS: the node's network namespace when it is not the test's own
  (tests/k8s_tier/node-up.sh prints it); kubectl and the "from the node" checks run there;
- VSWITCH_TEST_VPP_SOCKET: a VPP on that node (its API socket): the tier runs a second time with
  `Dataplane: vpp`;
- VSWITCH_TEST_KUBECTL (default `kubectl`), VSWITCH_TEST_K8S_POD_IMAGE (default agnhost 2.45),
  VSWITCH_TEST_K8S_ETCD_IMAGE (default: the manifest's own).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from testbed.netns import named_netns, unique
from tests.k8s_tier import deploy
from tests.k8s_tier.kube import Kube, wait_for
from tests.k8s_tier.tier import OUTSIDE_IP, OUTSIDE_NODE_IP, Tier

KUBECONFIG = os.environ.get("VSWITCH_TEST_KUBECONFIG", "")
NODE_NETNS = os.environ.get("VSWITCH_TEST_K8S_NODE_NETNS", "")
VPP_SOCKET = os.environ.get("VSWITCH_TEST_VPP_SOCKET", "")
KUBECTL = os.environ.get("VSWITCH_TEST_KUBECTL", "kubectl")
POD_IMAGE = os.environ.get("VSWITCH_TEST_K8S_POD_IMAGE",
                           "registry.k8s.io/e2e-test-images/agnhost:2.45")
ETCD_IMAGE = os.environ.get("VSWITCH_TEST_K8S_ETCD_IMAGE", "")
GATEWAY_INTERFACE = "vswitch0"  # the kernel dataplane's default GatewayInterface


def node_cmd(*argv: str, check: bool = True) -> bool:
    """A command in the node's network namespace; raises with its stderr when it fails and
    `check` is set, else says whether it succeeded."""
    prefix = ["nsenter", f"--net={NODE_NETNS}"] if NODE_NETNS else []
    r = subprocess.run([*prefix, *argv], capture_output=True, text=True, check=False)
    if r.returncode != 0 and check:
        raise AssertionError(f"{' '.join(argv)}: {r.stderr.strip()}")
    return r.returncode == 0


@pytest.fixture(scope="module")
def kube() -> Kube:
    return Kube(KUBECTL, KUBECONFIG, NODE_NETNS)


@pytest.fixture(scope="module", params=[
    "kernel",
    pytest.param("vpp", marks=pytest.mark.skipif(
        not VPP_SOCKET, reason="VSWITCH_TEST_VPP_SOCKET is not set (no VPP on the node)")),
])
def tier(request: pytest.FixtureRequest, kube: Kube) -> Iterator[Tier]:
    """The project's manifests with `Dataplane: <param>`, then the workload; torn down in
    reverse order so every pod's CNI DEL reaches a running agent."""
    dataplane: str = request.param
    system = deploy.for_node(deploy.manifests(), dataplane,
                             VPP_SOCKET if dataplane == "vpp" else "", ETCD_IMAGE)
    work = deploy.workload(POD_IMAGE)
    with ExitStack() as undo:
        # Every undo step runs even when an earlier one fails (ExitStack chains the errors).
        if dataplane == "kernel":
            # The pod subnet's gateway stays on the node after the agent is gone; another
            # dataplane deployed next routes that subnet elsewhere.
            undo.callback(node_cmd, "ip", "link", "del", GATEWAY_INTERFACE, check=False)
        undo.callback(kube.delete, [d for d in system if d["kind"] in ("DaemonSet", "ConfigMap")])
        kube.apply(system)
        kube.rollout("statefulset", "vswitch-etcd", "kube-system")
        kube.rollout("daemonset", "vswitch-agent", "kube-system")
        undo.callback(kube.delete, work)
        kube.apply(work)
        kube.rollout("deployment", deploy.APP, deploy.NAMESPACE, timeout=180)
        yield Tier.discover(kube, dataplane, NODE_NETNS)


@pytest.fixture(scope="module")
def outside() -> Iterator[str]:
    """A namespace beyond the node, like an upstream network: a veth to the node with TEST-NET-2
    addresses and no route back to any pod subnet. Yields its path."""
    with named_netns("vso") as path:
        name, node_end = os.path.basename(path), unique("vso")
        node_cmd("ip", "link", "add", node_end, "type", "veth", "peer", "name", "eth0",
                 "netns", name)
        node_cmd("ip", "addr", "add", f"{OUTSIDE_NODE_IP}/24", "dev", node_end)
        node_cmd("ip", "link", "set", node_end, "up")
        for argv in (["addr", "add", f"{OUTSIDE_IP}/24", "dev", "eth0"],
                     ["link", "set", "eth0", "up"], ["link", "set", "lo", "up"]):
            subprocess.run(["ip", "-n", name, *argv], check=True)
        wait_for("the outside veth",
                 lambda: node_cmd("ping", "-c1", "-W1", OUTSIDE_IP, check=False))
        yield path
        # Deleting the namespace deletes the veth pair with it.

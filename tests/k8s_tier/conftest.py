"""Fixtures of the k8s tier: the project deployed on a real cluster once per dataplane, the test
workload on it, and an "outside" network for egress; all removed again at the end of the module,
also when a step fails.

Environment (the tier skips without the first):
- VSWITCH_TEST_KUBECONFIG: the cluster's kubeconfig (its images imported, see docs/k8s-tier.md);
- VSWITCH_TEST_K8S_NODE_NETNS: the (first) node's network namespace when it is not the test's
  own (tests/k8s_tier/node-up.sh prints it); kubectl and that node's checks run there;
- VSWITCH_TEST_K8S_NODE2_NETNS: a second node's network namespace (node-join.sh prints it): the
  workload spreads over both nodes and the checks across nodes run; without it they skip;
- VSWITCH_TEST_VPP_SOCKET: a VPP on the node(s) (its API socket; `{node}` in it stands for the
  node's name, one VPP per node): the tier runs a second time with `Dataplane: vpp`;
- VSWITCH_TEST_K8S_VPP_IMAGE: instead, the VPP run deploys the VPP overlay as shipped
  (k8s/overlays/vpp: VPP in the vswitch pod), with this image for its VPP container (the nodes
  must run no VPP of their own);
- VSWITCH_TEST_KUBECTL (default `kubectl`), VSWITCH_TEST_K8S_POD_IMAGE (default agnhost 2.45),
  VSWITCH_TEST_K8S_ETCD_IMAGE (default: the manifest's own).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from functools import partial

import pytest

from testbed.netns import named_netns, unique
from tests.k8s_tier.kube import Kube, wait_for
from tests.k8s_tier.tier import KERNEL_LEFTOVERS as KERNEL_LEFTOVERS
from tests.k8s_tier.tier import (
    OUTSIDE_IP,
    Node,
    Tier,
    deployed,
    find_nodes,
    outside_addresses,
)

KUBECONFIG = os.environ.get("VSWITCH_TEST_KUBECONFIG", "")
NODE_NETNS = os.environ.get("VSWITCH_TEST_K8S_NODE_NETNS", "")
NODE2_NETNS = os.environ.get("VSWITCH_TEST_K8S_NODE2_NETNS", "")
VPP_SOCKET = os.environ.get("VSWITCH_TEST_VPP_SOCKET", "")
VPP_IMAGE = os.environ.get("VSWITCH_TEST_K8S_VPP_IMAGE", "")
KUBECTL = os.environ.get("VSWITCH_TEST_KUBECTL", "kubectl")
POD_IMAGE = os.environ.get("VSWITCH_TEST_K8S_POD_IMAGE",
                           "registry.k8s.io/e2e-test-images/agnhost:2.45")
ETCD_IMAGE = os.environ.get("VSWITCH_TEST_K8S_ETCD_IMAGE", "")
NEEDS_TWO_NODES = pytest.mark.skipif(
    not NODE2_NETNS, reason="VSWITCH_TEST_K8S_NODE2_NETNS is not set (no second node)")


@pytest.fixture(scope="module")
def kube() -> Kube:
    return Kube(KUBECTL, KUBECONFIG, NODE_NETNS)


@pytest.fixture(scope="module")
def nodes(kube: Kube) -> list[Node]:
    """The tier's nodes: the first, and the second when configured."""
    return find_nodes(kube, [NODE_NETNS, *([NODE2_NETNS] if NODE2_NETNS else [])])


@pytest.fixture(scope="module", params=[
    "kernel",
    pytest.param("vpp", marks=pytest.mark.skipif(
        not (VPP_SOCKET or VPP_IMAGE), reason="neither VSWITCH_TEST_VPP_SOCKET (a VPP on the "
        "nodes) nor VSWITCH_TEST_K8S_VPP_IMAGE (the VPP overlay's image) is set")),
])
def tier(request: pytest.FixtureRequest, kube: Kube, nodes: list[Node]) -> Iterator[Tier]:
    """The project's manifests with `Dataplane: <param>`, then the workload; torn down in
    reverse order so every pod's CNI DEL reaches a running agent."""
    with deployed(kube, nodes, request.param, VPP_SOCKET, ETCD_IMAGE, POD_IMAGE,
                  VPP_IMAGE) as tier:
        yield tier


@pytest.fixture(scope="module")
def outside(nodes: list[Node]) -> Iterator[str]:
    """A namespace beyond the nodes, like an upstream network: OUTSIDE_IP on its loopback, a veth
    to every node (outside_addresses) with a route to OUTSIDE_IP there, and no route back to any
    pod subnet. Yields its path."""
    with named_netns("vso") as path:
        name = os.path.basename(path)
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        subprocess.run(["ip", "-n", name, "addr", "add", f"{OUTSIDE_IP}/32", "dev", "lo"],
                       check=True)
        with ExitStack() as undo:
            for i, node in enumerate(nodes):
                near, far = outside_addresses(i)
                node_end, far_end = unique("vso"), f"eth{i}"
                node.cmd("ip", "link", "add", node_end, "type", "veth", "peer", "name", far_end,
                         "netns", name)
                # Deleting the namespace deletes the veth pair; the route goes with it.
                node.cmd("ip", "addr", "add", f"{near}/30", "dev", node_end)
                node.cmd("ip", "link", "set", node_end, "up")
                node.cmd("ip", "route", "add", f"{OUTSIDE_IP}/32", "via", far)
                undo.callback(node.cmd, "ip", "route", "del", f"{OUTSIDE_IP}/32", check=False)
                for argv in (["addr", "add", f"{far}/30", "dev", far_end],
                             ["link", "set", far_end, "up"]):
                    subprocess.run(["ip", "-n", name, *argv], check=True)
                wait_for(f"the outside veth of {node.name}", partial(
                    node.cmd, "ping", "-c1", "-W1", OUTSIDE_IP, check=False))
            yield path

"""etcd wiped under running agents: no subnet handed out twice, no live pod unwired (issue 15,
defect 2).

Two agents in this machine's namespace form one cluster: the same etcd, prefix and IPAM config,
each with its own node name, socket, state dir, REST port, gateway and host interface prefix.
etcd is wiped by restarting every member on its ports with an empty data dir.

Plan:
- both agents running, each with live pods: each binds its node ID again and writes its pods'
  records back by itself (records, allocations, links, routes and pings all converge), node IDs
  unchanged; a node joining afterwards gets an ID of its own (three distinct subnets); ADDs on
  every node work; an agent restarted after all this keeps its ID and its pods.
- both agents down while etcd is wiped, restarted in the other order: each takes its own node
  ID back (remembered in its state dir, not the smallest free one, which is the other node's
  subnet) and writes its live pods' records back from its own copy instead of unwiring them as
  orphans;
- one agent frozen (SIGSTOP) while etcd is wiped and another node claims its ID (the store's own
  claim, as that node's agent makes it: a second dataplane on the same subnet in this shared
  namespace would break the first's routes): thawed, the agent refuses ADDs with code 11 naming
  the holder, its readiness says why, its live pod stays wired; once the operator frees the ID,
  the agent binds it again, writes its record back and takes ADDs again.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator

import pytest

from agent.state.store import Store
from testbed.etcd import EtcdServer
from testbed.netns import ping
from tests.faults.invariants import assert_converged, wait_converged
from tests.faults.node import FaultNode
from tests.faults.test_etcd_late import wait_stopped
from tests.faults.test_etcd_outage import wait_ready

NodeFactory = Callable[..., FaultNode]


@pytest.fixture
def etcd() -> Iterator[EtcdServer]:
    with EtcdServer() as server:
        yield server


def member(make_node: NodeFactory, etcd: EtcdServer, first: FaultNode | None = None) -> FaultNode:
    """A node of the cluster `first` belongs to (or of a new one)."""
    if first is None:
        return make_node(etcd.endpoints)
    return make_node(etcd.endpoints, EtcdPrefix=first.config["EtcdPrefix"],
                     IPAMConfig=first.config["IPAMConfig"])


def node_id(node: FaultNode) -> int:
    status, body = node.running.get("/contiv/v1/ipam")
    assert status == 200, body
    return int(body["nodeId"])


def two_nodes_with_pods(make_node: NodeFactory, etcd: EtcdServer, pods: int) -> list[FaultNode]:
    """Two running agents of one cluster, `pods` pods added on each."""
    first = member(make_node, etcd)
    first.start()
    second = member(make_node, etcd, first)
    second.start()
    for node in (first, second):
        for _ in range(pods):
            added = node.add(node.new_pod())
            assert added.ok, str(added)
    return [first, second]


def test_etcd_wiped_under_two_running_nodes(etcd: EtcdServer, make_node: NodeFactory) -> None:
    nodes = two_nodes_with_pods(make_node, etcd, 3)
    first = nodes[0]
    for node in nodes:
        assert_converged(node, "before the wipe")
    ids = [node_id(n) for n in nodes]
    assert len(set(ids)) == 2

    etcd.wipe()
    for node in nodes:
        wait_ready(node, timeout=20.0)
        took = wait_converged(node, f"node {node.config['NodeName']}: etcd wiped", timeout=15.0)
        print(f"{node.config['NodeName']} converged {took:.2f} s after the wipe")
    assert [node_id(n) for n in nodes] == ids, "a running node changed its ID"

    third = member(make_node, etcd, first)
    third.start()
    nodes.append(third)
    subnets = [n.pod_network for n in nodes]
    assert len(set(subnets)) == 3, f"a subnet handed out twice: {subnets}"
    for node in nodes:
        added = node.add(node.new_pod())
        assert added.ok, str(added)
        assert_converged(node, f"node {node.config['NodeName']}: etcd wiped, one more pod")

    first.kill()
    first.start()
    assert node_id(first) == ids[0], "the restarted node changed its ID"
    assert_converged(first, "etcd wiped, then the first agent restarted")


def test_etcd_wiped_while_both_agents_are_down(etcd: EtcdServer, make_node: NodeFactory) -> None:
    nodes = two_nodes_with_pods(make_node, etcd, 2)
    ids = [node_id(n) for n in nodes]
    for node in nodes:
        node.kill()
    etcd.wipe()
    for node in reversed(nodes):
        node.start()
    assert [node_id(n) for n in nodes] == ids, "a node took another node's ID (and subnet)"
    for node in nodes:
        assert_converged(node, f"node {node.config['NodeName']}: etcd wiped while it was down")
        status, report = node.running.get("/v1/reconcile")
        assert status == 200 and len(report["restored"]) == 2, report


def taken_over(node: FaultNode, etcd: EtcdServer, store: Store, own_id: int) -> None:
    """Freezes the agent, wipes etcd, lets "intruder" claim the ID, thaws the agent and waits
    until it is not ready any more (or 15 s)."""
    process = node.running.process
    try:
        process.send_signal(signal.SIGSTOP)
        assert wait_stopped(process.pid), "the agent did not stop"
        etcd.wipe()
        assert store.claim_node_id("intruder", 255) == own_id  # another node's agent at start
    finally:
        process.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 15
    while node.running.get("/readiness")[0] == 200 and time.monotonic() < deadline:
        time.sleep(0.1)


def test_a_node_whose_id_was_taken_refuses_adds_and_keeps_its_pods(
    etcd: EtcdServer, make_node: NodeFactory
) -> None:
    node = member(make_node, etcd)
    node.start()
    pod = node.new_pod()
    assert node.add(pod).ok
    own_id = node_id(node)
    store = Store(etcd.endpoints, node.config["EtcdPrefix"])
    try:
        taken_over(node, etcd, store, own_id)
        status, body = node.running.get("/readiness")
        assert status == 503 and "intruder" in str(body), f"{status} {body}\n{node.log()}"
        refused = node.add(node.new_pod())
        assert refused.code == 11 and "intruder" in refused.result.stdout, str(refused)
        assert ping(pod.netns, pod.gateway), "the live pod lost its network"
        assert store.release_node_id("intruder")  # the operator frees the ID
    finally:
        store.close()
    wait_ready(node, timeout=15.0)
    assert node.add(node.new_pod()).ok
    assert node_id(node) == own_id
    assert_converged(node, "ID taken while etcd was wiped, then freed")

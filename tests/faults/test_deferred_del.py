"""DELs the plugin answers alone: the agent is down, or dies before replying.

When the agent cannot be reached, or drops the connection before answering, the plugin journals
the DEL on the node's disk and exits 0 (cni_client/README.md), so that no pod sticks in
Terminating. The runtime then removes the sandbox. What the agent did not do must then happen
without any further DEL.

Plan (the agent down at the DEL, or killed at the `del:detach` failpoint inside it):
- the runtime removes the namespace before the agent is back (containerd's order): the
  restarted agent's reconcile finds the namespace gone and releases everything;
- the agent is back before the namespace goes: the agent converges by itself, settling the
  plugin's journal entry (without it, the record and address leaked until the runtime's GC,
  and after del:detach reconcile even re-wired the deleted pod); the runtime's GC releases the
  attachment in any case;
- the agent running but unreachable at the DEL (its socket moved away a moment), and the same
  attachment ADDed again right after: the re-ADD settles the plugin's journal entry first, so
  the drainer's next rescan does not tear the new attachment down (issue 15, defect 1).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from testbed.agent import run_plugin
from tests.faults.invariants import assert_converged, problems, wait_converged
from tests.faults.node import FaultNode, Pod

NodeFactory = Callable[..., FaultNode]
WAYS = ("agent down", "del:detach")


def deferred_del(node: FaultNode, way: str) -> tuple[Pod, Pod, str]:
    """Two live pods; the first one's DEL answered by the plugin alone, the agent dead."""
    node.start()
    pod, other = node.new_pod(), node.new_pod()
    assert node.add(pod).ok and node.add(other).ok
    node.kill()
    if way != "agent down":
        node.start(way)
    deleted = node.delete(pod)
    context = f"{way}: {deleted}"
    assert deleted.deferred, context
    assert node.kill() == -9, context
    return pod, other, context


@pytest.mark.parametrize("way", WAYS)
def test_sandbox_removed_before_restart_is_released(
    way: str, etcd_endpoints: list[str], make_node: NodeFactory
) -> None:
    node = make_node(etcd_endpoints)
    _, _, context = deferred_del(node, way)
    assert not node.forget(), context
    node.start()
    assert_converged(node, f"{context}; sandbox removed, agent restarted")


@pytest.mark.parametrize("way", WAYS)
def test_sandbox_removed_after_restart_converges_by_itself(
    way: str, etcd_endpoints: list[str], make_node: NodeFactory
) -> None:
    node = make_node(etcd_endpoints)
    _, _, context = deferred_del(node, way)
    node.start()
    assert not node.forget(), context
    wait_converged(node, f"{context}; agent restarted, then the sandbox removed", timeout=3.0)


def test_sandbox_removed_after_restart_is_released_by_gc(
    etcd_endpoints: list[str], make_node: NodeFactory
) -> None:
    node = make_node(etcd_endpoints)
    _, other, context = deferred_del(node, "agent down")
    node.start()
    node.forget()
    leaked = problems(node, reach=False)
    gc_config = dict(node.net_config())
    gc_config["cni.dev/valid-attachments"] = [
        {"containerID": other.container_id, "ifname": other.ifname}
    ]
    gc = run_plugin("GC", gc_config)
    assert gc.returncode == 0, f"{context}; GC: {gc}"
    assert_converged(node, f"{context}; agent restarted, sandbox removed ({leaked}), GC")


def test_readd_right_after_a_journaled_del_keeps_its_network(
    etcd_endpoints: list[str], make_node: NodeFactory
) -> None:
    node = make_node(etcd_endpoints)
    agent = node.start()
    pod = node.new_pod()
    assert node.add(pod).ok
    hidden = agent.socket.with_name("hidden.sock")
    os.rename(agent.socket, hidden)  # the agent is up, but the plugin cannot reach it
    try:
        deleted = node.delete(pod)
    finally:
        os.rename(hidden, agent.socket)
    context = f"DEL while the agent was unreachable: {deleted}"
    assert deleted.deferred, context
    again = node.add(pod)  # well within the drainer's 1 s rescan
    assert again.ok, f"{context}; re-ADD: {again}"
    time.sleep(2.5)  # two rescans of the drainer: the old DEL must not undo the new ADD
    assert_converged(node, f"{context}; re-ADD at once, then the drainer ran")

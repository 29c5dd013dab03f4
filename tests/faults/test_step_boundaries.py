"""The agent SIGKILLed at every step boundary of ADD and DEL, restarted, and the runtime's retries.

Plan, for each failpoint of agent/infra/failpoints (the agent kills itself the first time it passes
it):
- ADD (allocate, record, wire, podside, commit): a bystander pod is live; the agent is restarted
  with the failpoint armed and ADD of a new pod dies with it (the plugin fails with a CNI error
  object). A clean agent starts; the runtime calls DEL for the failed attachment (exit 0), and
  the node has converged: only the bystander, nothing leaked or orphaned, the failed pod's
  namespace empty. The runtime then ADDs the pod again: both pods live and reachable. Finally
  both are deleted and the node is empty.
- DEL (detach, delete, release): two pods live; the agent restarted with the failpoint dies
  in the DEL of one. The plugin either fails with a CNI error object, or (its documented best
  effort: a pod must never stick in Terminating) answers success with a warning that the agent
  will release the rest; then the runtime removes the pod's namespace at once, as containerd
  does. A clean agent starts, the runtime retries DEL (a retry, or a repeated DEL: exit 0 both),
  and the node has converged with the other pod reachable.
After every step the invariants of tests/faults/invariants hold.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest

from agent.infra.failpoints import ADD_POINTS, DEL_POINTS
from tests.faults.invariants import assert_converged
from tests.faults.node import FaultNode

NodeFactory = Callable[..., FaultNode]


def _died_at(node: FaultNode, failpoint: str, context: str) -> None:
    status = node.wait_dead()
    assert status == -signal.SIGKILL, f"{context}: agent exited {status}, not SIGKILL\n{node.log()}"
    assert f"failpoint {failpoint}" in node.log(), f"{context}: failpoint not logged\n{node.log()}"


@pytest.mark.parametrize("failpoint", ADD_POINTS)
def test_add_killed_at_step_boundary(
    failpoint: str, etcd_endpoints: list[str], make_node: NodeFactory
) -> None:
    node = make_node(etcd_endpoints)
    node.start()
    bystander = node.new_pod()
    assert node.add(bystander).ok
    node.kill()

    node.start(failpoint)
    pod = node.new_pod()
    failed = node.add(pod)
    context = f"ADD killed at {failpoint}: {failed}"
    assert not failed.ok, context
    assert failed.code is not None, f"{context}: the plugin printed no CNI error object"
    _died_at(node, failpoint, context)

    node.start()
    retried = node.delete(pod)  # the runtime's DEL after a failed ADD
    assert retried.ok, f"{context}; then {retried}"
    assert_converged(node, f"{context}; after restart and DEL")

    again = node.add(pod)  # the runtime may try the same sandbox again
    assert again.ok, f"{context}; then {again}"
    assert_converged(node, f"{context}; after restart, DEL and ADD again")

    for p in (pod, bystander):
        assert node.delete(p).ok
    assert_converged(node, f"{context}; after deleting everything")
    assert node.running.allocated() == set()


@pytest.mark.parametrize("failpoint", DEL_POINTS)
def test_del_killed_at_step_boundary(
    failpoint: str, etcd_endpoints: list[str], make_node: NodeFactory
) -> None:
    node = make_node(etcd_endpoints)
    node.start()
    pod, bystander = node.new_pod(), node.new_pod()
    for p in (pod, bystander):
        assert node.add(p).ok
    node.kill()

    node.start(failpoint)
    failed = node.delete(pod)
    context = f"DEL killed at {failpoint}: {failed}"
    assert failed.deferred or failed.code not in (0, None), context
    _died_at(node, failpoint, context)
    side = node.forget()  # a DEL that answered success: the runtime removes the sandbox
    assert not side, f"{context}: {side}"

    node.start()
    retried = node.delete(pod)  # the runtime retries a failed DEL (or repeats a done one)
    assert retried.ok and not retried.deferred, f"{context}; then {retried}"
    assert_converged(node, f"{context}; after restart and DEL again")

    repeated = node.delete(pod)  # DEL is idempotent
    assert repeated.ok, f"{context}; then a repeated {repeated}"
    assert node.delete(bystander).ok
    assert_converged(node, f"{context}; after deleting everything")
    assert node.running.allocated() == set()

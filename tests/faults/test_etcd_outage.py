"""etcd stopped (SIGKILL) and started again under a running agent: ADD fails fast, DEL still works.

Each test runs its own single-member etcd (testbed/etcd), never the session's, and
restarts it on the same ports and data dir, so the agent sees the same store come back.

Plan:
- ADD while etcd is down: fails within ~2 s with code 11 and leaves no host link, nothing in
  the pod's namespace, and nothing allocated once etcd is back; the runtime's DEL then
  succeeds and a new ADD of the same sandbox works.
- DEL of a live pod while etcd is down: exit 0 answered by the agent itself, the pod's interface
  and host link gone at once; once etcd is back the agent converges by itself within 10 s
  (record and address released), no leak, no duplicate when the next pod is added.
- The same DEL, then the agent SIGKILLed before etcd is back: the release was durable (the DEL
  journal in `StateDir`), so the restarted agent converges although the pod's namespace still
  exists (reconcile alone would keep a record whose namespace is there).
- Random trials (seeded like tests/faults/test_random_kills): concurrent ADDs and DELs in flight
  when etcd is SIGKILLed after a random delay, etcd back after another; the runtime's retries;
  the agent converges by itself within 10 s and every invariant holds.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed.etcd import EtcdServer
from tests.faults.invariants import assert_converged, links_settled, wait_converged
from tests.faults.node import FaultNode, Pod, host_links, pod_has_interface
from tests.faults.seed import SEED_ENV
from tests.faults.trials import describe, in_flight, plan, retry, settle, top_up

NodeFactory = Callable[..., FaultNode]
ADD_DEADLINE = 3.0  # the agent's 2 s etcd deadline plus the plugin's exec, on a loaded machine
ETCD_TRIALS = 6



@pytest.fixture
def etcd() -> Iterator[EtcdServer]:
    with EtcdServer() as server:
        yield server


def prefix_links(node: FaultNode) -> set[str]:
    return {str(link["ifname"]) for link in host_links()
            if str(link["ifname"]).startswith(node.prefix)}


def wait_ready(node: FaultNode, timeout: float = 10.0) -> float:
    """Seconds until the agent reports ready again (etcd back)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if node.running.get("/readiness")[0] == 200:
                return time.monotonic() - start
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"agent not ready {timeout} s after etcd came back\n{node.log()}")


def live_node(make_node: NodeFactory, etcd: EtcdServer, tmp_path: Path, pods: int) -> FaultNode:
    # the DEL journal's directory, explicitly: these tests depend on it
    node = make_node(etcd.endpoints, StateDir=str(tmp_path / "journal"))
    node.start()
    for _ in range(pods):
        added = node.add(node.new_pod())
        assert added.ok, str(added)
    assert_converged(node, "before the outage")
    return node


def test_add_while_etcd_down_fails_fast_and_leaves_nothing(
    etcd: EtcdServer, make_node: NodeFactory
) -> None:
    node = make_node(etcd.endpoints)
    node.start()
    assert node.add(node.new_pod()).ok
    links_before = prefix_links(node)

    etcd.stop()
    pod = node.new_pod()
    failed = node.add(pod)
    context = f"ADD with etcd down: {failed} after {failed.seconds:.2f} s"
    assert failed.code == 11, context
    assert failed.seconds < ADD_DEADLINE, context
    assert not pod_has_interface(pod), f"{context}: the pod's namespace has {pod.ifname}"
    assert prefix_links(node) == links_before, f"{context}: host links changed"

    etcd.start()
    wait_ready(node)
    assert_converged(node, f"{context}; etcd back")
    retried = node.delete(pod)  # the runtime's DEL after a failed ADD
    assert retried.ok and not retried.deferred, f"{context}; then {retried}"
    assert_converged(node, f"{context}; etcd back, DEL")
    again = node.add(pod)
    assert again.ok, f"{context}; then {again}"
    assert_converged(node, f"{context}; etcd back, DEL, ADD again")


def _del_during_outage(node: FaultNode, etcd: EtcdServer) -> tuple[Pod, str]:
    pod, other = list(node.live.values())[:2]
    other_link = {r["wiring"]["host_ifname"] for r in node.running.get("/v1/pods")[1]["pods"]
                  if r["container_id"] == other.container_id}
    etcd.stop()
    deleted = node.delete(pod)
    context = f"DEL with etcd down: {deleted} after {deleted.seconds:.2f} s"
    assert deleted.ok and not deleted.deferred, context
    assert links_settled(node) == [], context  # the veth's delete is done in the background
    assert not pod_has_interface(pod), f"{context}: the pod still has {pod.ifname}"
    assert prefix_links(node) == other_link, f"{context}: host links {prefix_links(node)}"
    return pod, context


def test_del_while_etcd_down_converges_when_etcd_is_back(
    etcd: EtcdServer, make_node: NodeFactory, tmp_path: Path
) -> None:
    node = live_node(make_node, etcd, tmp_path, pods=2)
    _, context = _del_during_outage(node, etcd)
    time.sleep(0.5)  # the agent's retries meet a dead etcd for a while
    etcd.start()
    took = wait_converged(node, f"{context}; etcd back", timeout=10.0)
    print(f"converged {took:.2f} s after etcd came back")
    node.forget()
    assert node.add(node.new_pod()).ok
    assert_converged(node, f"{context}; etcd back, converged, one more pod")


def test_del_while_etcd_down_survives_an_agent_kill(
    etcd: EtcdServer, make_node: NodeFactory, tmp_path: Path
) -> None:
    node = live_node(make_node, etcd, tmp_path, pods=2)
    _, context = _del_during_outage(node, etcd)
    node.kill()  # before etcd is back: only the journal on disk remembers the release
    etcd.start()
    node.start()
    took = wait_converged(node, f"{context}; agent killed, etcd back, agent restarted")
    print(f"converged {took:.2f} s after the restart")
    node.forget()
    assert node.add(node.new_pod()).ok
    assert_converged(node, f"{context}; after the restart, one more pod")


def test_etcd_killed_under_concurrent_operations(
    fault_seed: int, etcd: EtcdServer, make_node: NodeFactory
) -> None:
    rng = random.Random(fault_seed ^ 0xE7CD)
    node = make_node(etcd.endpoints)
    node.start()
    stats: Counter[str] = Counter()
    for trial in range(ETCD_TRIALS):
        label = f"{SEED_ENV}={fault_seed} etcd trial {trial + 1}/{ETCD_TRIALS}"
        top_up(node, label)
        ops = plan(rng, node)
        delay, down = rng.uniform(0, 0.15), rng.uniform(0, 1.0)
        outcomes = in_flight(node, ops, delay, etcd.stop)
        context = (f"{label}: etcd killed after {delay * 1000:.0f} ms of {describe(outcomes)}; "
                   f"back {down * 1000:.0f} ms after the last answer")
        failed = settle(node, outcomes, stats, context)
        time.sleep(down)
        etcd.start()
        wait_ready(node)
        retry(node, failed, context)
        wait_converged(node, context, timeout=10.0)
    print(f"{ETCD_TRIALS} etcd trials, seed {fault_seed}:", dict(sorted(stats.items())))

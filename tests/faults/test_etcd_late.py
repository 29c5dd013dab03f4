"""etcd answering the final write of an ADD late: the ADD fails, and no phantom record stays.

The agent is started with the failpoint `add:podside=stop`: it SIGSTOPs itself right before the
ADD's final write (the record marked "ready"). The test then freezes etcd (SIGSTOP) and lets
the agent go on: the write waits in etcd's socket and the agent's deadline passes (code 11 for
the runtime), the undo's delete meets the frozen etcd too. etcd is then thawed and answers both,
late; the write may even be applied after the agent gave up. Whatever etcd did, the runtime was
told the ADD failed, so the node must converge to no record, no allocation, no link for that
pod, by itself (issue 15, defect 5: a "ready" record stayed, which the next restart wired); then
the runtime's DEL and a new ADD of the same pod work.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from testbed.etcd import EtcdServer
from tests.faults.invariants import assert_converged, wait_converged
from tests.faults.node import FaultNode
from tests.faults.test_etcd_outage import wait_ready

NodeFactory = Callable[..., FaultNode]


@pytest.fixture
def etcd() -> Iterator[EtcdServer]:
    with EtcdServer() as server:
        try:
            yield server
        finally:
            server.thaw()


def all_stopped(pid: int) -> bool:
    """Every thread of the process is stopped (T): /proc/PID/stat shows the main thread only."""
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        text = stat.read_text()
        if text[text.rindex(")") + 2] != "T":
            return False
    return True


def wait_stopped(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all_stopped(pid):
            return True
        time.sleep(0.01)
    return False


def test_final_write_answered_late_leaves_no_phantom_record(
    etcd: EtcdServer, make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node(etcd.endpoints, StateDir=str(tmp_path / "state"))
    neighbour = node.new_pod()
    node.start()
    assert node.add(neighbour).ok
    node.kill()
    agent = node.start("add:podside=stop")
    pod = node.new_pod()
    with ThreadPoolExecutor(1) as pool:
        adding = pool.submit(node.call, "ADD", pod)
        stopped = wait_stopped(agent.process.pid)
        etcd.freeze()
        frozen = all(wait_stopped(m.proc.pid) for m in etcd.members if m.proc is not None)
        agent.process.send_signal(signal.SIGCONT)
        outcome = adding.result()
    context = f"ADD with etcd frozen at its final write: {outcome} after {outcome.seconds:.2f} s"
    assert stopped, f"the agent never reached add:podside; {context}\n{node.log()}"
    assert frozen, "etcd did not stop"
    assert outcome.code == 11, f"{context}\n{node.log()}"
    node.record(outcome)
    etcd.thaw()
    wait_ready(node)
    took = wait_converged(node, f"{context}; etcd thawed", timeout=10.0)
    print(f"converged {took:.2f} s after etcd was thawed")

    retried = node.delete(pod)  # the runtime's DEL after a failed ADD
    assert retried.ok, f"{context}; then {retried}"
    assert_converged(node, f"{context}; etcd thawed, DEL")
    again = node.add(pod)
    assert again.ok, f"{context}; then {again}"
    assert_converged(node, f"{context}; etcd thawed, DEL, ADD again")

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

from tests.faults.invariants import assert_converged, wait_converged
from tests.faults.node import FaultNode
from tests.faults.test_etcd_outage import wait_ready
from tests.helpers.etcd import EtcdServer

NodeFactory = Callable[..., FaultNode]


@pytest.fixture
def etcd() -> Iterator[EtcdServer]:
    with EtcdServer() as server:
        try:
            yield server
        finally:
            server.thaw()


def process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat (T: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def wait_stopped(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process_state(pid) == "T":
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
        agent.process.send_signal(signal.SIGCONT)
        outcome = adding.result()
    context = f"ADD with etcd frozen at its final write: {outcome} after {outcome.seconds:.2f} s"
    assert stopped, f"the agent never reached add:podside; {context}\n{node.log()}"
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

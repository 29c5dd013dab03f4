"""A hostile StateDir under a running agent: read-only, then full (issue 23, defects 2 and 3).

The StateDir is a small tmpfs mounted for the test (tests/faults/disk: in this machine's mount
namespace, where the agent runs too) and always unmounted at the end, also after a failure.

Plan:
- read-only StateDir, etcd up: DEL of a live pod answers success (was 999 on every retry), and
  a repeated DEL too; the pool's in-use count matches etcd's allocations (was one more per DEL:
  the release never ran); an ADD still works; the trouble is logged once (one ERROR line for
  several DELs and the ADD), counted in /metrics (`vswitch_cni_state_dir_writable{part="pods"}`
  0, `vswitch_cni_record_copies_behind` = the copies not removed or written); once the mount
  is writable again the running agent puts the copies right by itself and the gauges recover;
  a copy left when the agent is killed while the disk is read-only is gone after the next start.
- full StateDir: an ADD with etcd up works and leaves no temp file in `pods/`; a DEL with etcd
  down answers 11 naming etcd and the StateDir (was 999 with a traceback), leaves no temp file
  in `pending-deletes/`, and keeps the addresses; with space again the retried DEL is journaled
  (success) and, etcd back, the node converges.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed.etcd import EtcdServer
from tests.faults.disk import fill, read_only, tmpfs
from tests.faults.invariants import agent_view, assert_converged, wait_converged
from tests.faults.node import FaultNode

NodeFactory = Callable[..., FaultNode]


def metric(node: FaultNode, series: str) -> float:
    """The value of one series (name and labels as /metrics prints them)."""
    status, text = node.running.get("/metrics")
    assert status == 200, text
    for line in str(text).splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {series} in /metrics")


def copies(state: Path) -> set[str]:
    return {p.name for p in (state / "pods").glob("*.json")}


def temp_files(state: Path) -> list[str]:
    return sorted(str(p.relative_to(state)) for p in state.rglob("*.tmp"))


def wait_until(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.1)


def state_dir_errors(node: FaultNode) -> list[str]:
    return [line for line in node.running.log().splitlines()
            if " ERROR " in line and "StateDir" in line]


def test_a_read_only_state_dir_loses_no_release(
        make_node: NodeFactory, etcd_endpoints: list[str], tmp_path: Path) -> None:
    with tmpfs(tmp_path / "state", "4m") as state:
        node = make_node(etcd_endpoints, StateDir=str(state))
        node.start()
        pods = [node.new_pod() for _ in range(3)]
        for pod in pods:
            assert node.add(pod).ok
        assert_converged(node, "before the StateDir turned read-only")
        assert len(copies(state)) == 3

        with read_only(state):
            first = node.delete(pods[0])
            assert first.ok and not first.deferred, f"DEL with a read-only StateDir: {first}"
            again = node.delete(pods[0])
            assert again.ok, f"the runtime's repeated DEL: {again}"
            second = node.delete(pods[1])
            assert second.ok, f"a second DEL with a read-only StateDir: {second}"
            records, allocations, pools = agent_view(node)
            assert pools[0]["inUse"] == len(allocations) == len(records) == 1, (
                f"pool {pools}, etcd allocations {sorted(allocations)}, records {len(records)}")
            added = node.add(node.new_pod())
            assert added.ok, f"ADD with a read-only StateDir: {added}"
            assert_converged(node, "two DELs and an ADD with a read-only StateDir")
            assert len(copies(state)) == 3  # two stale, the new pod's not written
            assert metric(node, "vswitch_cni_record_copies_behind") == 3
            assert metric(node, 'vswitch_cni_state_dir_writable{part="pods"}') == 0
            errors = state_dir_errors(node)
            assert len(errors) == 1, "\n".join(errors) or node.log()
            assert "read-only" in errors[0].lower() and str(state / "pods") in errors[0]

        # writable again: the running agent puts the copies right by itself
        wait_until(lambda: metric(node, "vswitch_cni_record_copies_behind") == 0,
                   "the copies put right once the StateDir is writable again")
        assert len(copies(state)) == len(node.live) == 2
        node.delete(pods[2])
        assert metric(node, 'vswitch_cni_state_dir_writable{part="pods"}') == 1
        node.forget()
        assert_converged(node, "StateDir writable again")

        # a copy left behind when the agent dies while the disk is read-only
        survivor = node.new_pod()
        assert node.add(survivor).ok
        with read_only(state):
            gone = next(iter(node.live.values()))
            assert node.delete(gone).ok
            node.kill()
        node.forget()
        node.start()
        wait_converged(node, "restarted after a DEL on a read-only StateDir")
        assert len(copies(state)) == len(node.live) == 1
        assert "Traceback" not in "".join(p.read_text() for p in tmp_path.glob("node*/*.log"))


@pytest.fixture
def etcd() -> Iterator[EtcdServer]:
    with EtcdServer() as server:
        yield server


def test_a_full_state_dir_with_etcd_down_answers_try_again_later(
        make_node: NodeFactory, etcd: EtcdServer, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "state", "1m") as state:
        node = make_node(etcd.endpoints, StateDir=str(state))
        node.start()
        pods = [node.new_pod() for _ in range(2)]
        assert node.add(pods[0]).ok
        filler = fill(state)
        added = node.add(pods[1])
        assert added.ok, f"ADD with a full StateDir: {added}"
        assert temp_files(state) == [], "a failed copy left its temp file"
        assert_converged(node, "ADD with a full StateDir")

        etcd.stop()
        failed = node.delete(pods[0])
        context = f"DEL with etcd down and a full StateDir: {failed}"
        assert failed.code == 11, context
        message = failed.result.json["msg"] + " " + failed.result.json.get("details", "")
        assert "etcd" in message and "StateDir" in message, context
        assert "No space left" in message, context
        assert temp_files(state) == [], f"{context}: temp files left"
        assert "Traceback" not in node.running.log(), context
        assert "unexpected error" not in node.running.log(), context

        filler.unlink()
        retried = node.delete(pods[0])
        assert retried.ok and not retried.deferred, f"{context}; space again: {retried}"
        etcd.start()
        wait_converged(node, f"{context}; space again, DEL journaled, etcd back")
        assert temp_files(state) == []

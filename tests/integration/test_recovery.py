"""Recovery of the lifecycle, in process with the real pieces.

- etcd unreachable: ADD fails with 11 and leaves nothing; DEL still tears the pod down and the
  release it owes etcd is journaled on disk, settled by the drainer once etcd is back, or by the
  next agent's reconcile if this one dies first. Nothing leaked, nothing handed out twice.
- A live pod whose wiring was damaged behind the agent's back is repaired by reconcile, with
  its recorded addresses, and reachable again.
- A netns path that now names another namespace is a dead pod.
- An ADD whose final write etcd applied but answered too late (the ADD fails with 11), etcd then
  not answering the undo's delete either: the undo is journaled like a DEL, the address stays
  reserved, and once etcd answers no record is left, "ready" or not (issue 15, defect 5).
- A DEL the plugin journaled on disk (agent unreachable) is settled by the next ADD of the same
  attachment before that ADD proceeds, even when no rescan has read the entry yet: else the
  drainer later tears the new attachment down (issue 15, defect 1).

Real pieces in this process: an own etcd (stopped and started), the kernel dataplane in this
machine's namespace, pod sides in fresh test namespaces; a lifecycle PodManager per "agent".
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agent.lifecycle.pods import PodManager
from agent.lifecycle.reconcile import reconcile
from agent.model.errors import TryAgainLater, UnknownContainer
from agent.model.pod import PodRecord
from cni_client.journal import journal_delete
from testbed.etcd import EtcdServer
from testbed.netns import ping
from tests.integration.lifecycle import host_link, in_use, link_live, managers, request

SUBNET = "10.236.0.0/16"
T = TypeVar("T")


@pytest.fixture
def etcd() -> Iterator[EtcdServer]:
    with EtcdServer() as server:
        yield server


@pytest.fixture
def node(etcd: EtcdServer, tmp_path: Path) -> Iterator[Callable[[], PodManager]]:
    """Builds "agents" for one node: same etcd prefix, gateway link and state dir."""
    with managers(etcd.endpoints, tmp_path / "state", SUBNET) as make:
        yield make


def retry_while_unreachable(call: Callable[[], T]) -> T:
    """What a runtime does with code 11: tries again (the client skips a member that just
    failed for up to a second)."""
    for _ in range(50):
        try:
            return call()
        except TryAgainLater:
            time.sleep(0.1)
    return call()


def test_del_while_etcd_down_is_journaled_and_settled_by_the_drainer(
    node: Callable[[], PodManager], etcd: EtcdServer, make_netns: Callable[[], str]
) -> None:
    pods = node()
    reconcile(pods)
    kept, gone = make_netns(), make_netns()
    kept_rec = pods.add(request("ADD", kept, "kept"))
    gone_rec = pods.add(request("ADD", gone, "gone"))
    assert in_use(pods) == 2

    etcd.stop()
    pods.delete(request("DEL", gone, "gone"))  # answers success although etcd is down
    assert not link_live(host_link(pods, "gone"))
    assert pods.journal is not None and len(pods.journal) == 1
    assert in_use(pods) == 2, "the address must stay reserved until etcd has the release"
    late = make_netns()
    with pytest.raises(TryAgainLater):
        pods.add(request("ADD", late, "late"))
    assert not link_live(host_link(pods, "late")) and in_use(pods) == 2
    pods.delete(request("DEL", gone, "gone"))  # the runtime's retry: still fine
    assert len(pods.journal) == 1

    etcd.start()
    pods.start_drainer(interval=0.1)
    try:
        for _ in range(100):
            if not len(pods.journal):
                break
            time.sleep(0.1)
    finally:
        pods.stop()
    assert len(pods.journal) == 0
    assert pods.store.get_pod(1, gone_rec.key) is None
    allocations = pods.store.list_allocations(1)  # type: ignore[attr-defined]
    assert set(allocations) == {kept_rec.addresses[0].split("/")[0]}
    assert in_use(pods) == 1
    with pytest.raises(UnknownContainer):
        pods.check(request("CHECK", gone, "gone"))
    assert pods.check(request("CHECK", kept, "kept")).key == kept_rec.key


def test_a_journal_outlives_the_agent_and_reconcile_settles_it(
    node: Callable[[], PodManager], etcd: EtcdServer, make_netns: Callable[[], str]
) -> None:
    first = node()
    reconcile(first)
    netns = make_netns()
    record = first.add(request("ADD", netns, "p1"))
    etcd.stop()
    first.delete(request("DEL", netns, "p1"))
    etcd.start()  # the first agent dies before its drainer ran: only the disk remembers

    second = node()
    # etcd has just restarted: its first answer may still be a refusal, which the agent's
    # start meets by reconciling again (CI saw it once: NoServerAvailableError)
    report = retry_while_unreachable(lambda: reconcile(second))
    assert report.pending_deletes == 0 and report.live == 0
    assert str(record.key) not in report.removed_dead + report.removed_unfinished
    assert second.store.get_pod(1, record.key) is None
    assert second.store.list_allocations(1) == {}  # type: ignore[attr-defined]
    assert in_use(second) == 0


def test_add_of_a_journaled_attachment_settles_it_first(
    node: Callable[[], PodManager], etcd: EtcdServer, make_netns: Callable[[], str]
) -> None:
    pods = node()
    reconcile(pods)
    netns = make_netns()
    pods.add(request("ADD", netns, "again"))
    etcd.stop()
    pods.delete(request("DEL", netns, "again"))
    etcd.start()
    # Without settling first, the old "ready" record would be answered as a repeated ADD.
    record = retry_while_unreachable(lambda: pods.add(request("ADD", netns, "again")))
    assert pods.journal is not None and len(pods.journal) == 0
    assert link_live(host_link(pods, "again"))
    assert pods.check(request("CHECK", netns, "again")).key == record.key
    assert in_use(pods) == 1


def test_readd_settles_a_del_the_plugin_journaled_first(
    node: Callable[[], PodManager], make_netns: Callable[[], str], tmp_path: Path
) -> None:
    pods = node()
    reconcile(pods)
    netns = make_netns()
    first = pods.add(request("ADD", netns, "readd"))
    # The runtime's DEL could not reach the agent: the plugin journaled it and exited 0.
    journal_delete(str(tmp_path / "state"), "readd", "eth0", netns)
    again = pods.add(request("ADD", netns, "readd"))  # before any rescan read the entry
    assert pods.journal is not None and len(pods.journal) == 0
    assert again.created > first.created, "the re-ADD answered the old, deleted attachment"
    assert pods.drain_journal() == 0  # what the drainer does a second later
    assert pods.check(request("CHECK", netns, "readd")).key == again.key
    assert link_live(host_link(pods, "readd"))
    assert in_use(pods) == 1


class LateEtcd:
    """The store, except that etcd applies the ADD's final write but its answer comes after the
    deadline, and etcd then answers nothing (the undo's delete) until the test says so."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def update_pod(
        self, node_id: int, record: PodRecord, previous: PodRecord | None = None
    ) -> None:
        self._real.update_pod(node_id, record, previous)
        raise TryAgainLater("etcd is unreachable (update pod)", "answered after the deadline")

    def delete_pod(self, *args: Any, **kwargs: Any) -> PodRecord | None:
        raise TryAgainLater("etcd is unreachable (delete pod)", "no answer")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def add_answered_late(pods: PodManager, netns: str, name: str) -> None:
    """An ADD whose final etcd write is answered too late (it fails with 11)."""
    reconcile(pods)
    real = pods.store
    pods.store = LateEtcd(real)
    with pytest.raises(TryAgainLater):
        pods.add(request("ADD", netns, name))
    pods.store = real


def test_an_add_whose_final_write_is_answered_late_leaves_no_record(
    node: Callable[[], PodManager], make_netns: Callable[[], str]
) -> None:
    pods, netns = node(), make_netns()
    add_answered_late(pods, netns, "late")
    key = request("ADD", netns, "late").key
    assert not link_live(host_link(pods, "late"))
    assert in_use(pods) == 1, "released while etcd may still hold the allocation"
    assert pods.journal is not None and pods.journal.has(key)

    assert pods.drain_journal() == 0  # etcd answers again
    assert pods.store.get_pod(1, key) is None, "the failed ADD left its record"
    assert pods.store.list_allocations(1) == {}  # type: ignore[attr-defined]
    assert in_use(pods) == 0
    again = pods.add(request("ADD", netns, "late"))  # the runtime's retry
    assert pods.check(request("CHECK", netns, "late")).key == again.key
    assert in_use(pods) == 1


def test_the_runtimes_del_after_a_late_answered_add_releases_once(
    node: Callable[[], PodManager], make_netns: Callable[[], str]
) -> None:
    pods, netns = node(), make_netns()
    add_answered_late(pods, netns, "late")
    journaled = pods.journal.get(request("DEL", netns, "late").key) if pods.journal else None
    assert journaled is not None and journaled.record is not None
    pods.delete(request("DEL", netns, "late"))  # etcd answers again before the drainer runs
    assert in_use(pods) == 0
    pods.pools.reserve(journaled.record.addresses)  # the freed address is handed out again
    pods.drain_journal()
    assert in_use(pods) == 1, "an address was released twice: a live pod's is free again"
    assert pods.store.list_allocations(1) == {}  # type: ignore[attr-defined]


def test_reconcile_treats_a_reused_netns_path_as_dead(
    node: Callable[[], PodManager], make_netns: Callable[[], str]
) -> None:
    pods = node()
    reconcile(pods)
    netns = make_netns()
    record = pods.add(request("ADD", netns, "reuse"))
    assert record.netns_inode
    name = Path(netns).name
    subprocess.run(["ip", "netns", "del", name], check=True)
    subprocess.run(["ip", "netns", "add", name], check=True)  # same path, another namespace
    with pytest.raises(Exception, match="another network namespace"):
        pods.check(request("CHECK", netns, "reuse"))
    report = reconcile(node())
    assert report.removed_dead == [str(record.key)]
    assert pods.store.list_allocations(1) == {}  # type: ignore[attr-defined]


def test_reconcile_rewires_a_live_pod_whose_host_link_was_deleted(
    node: Callable[[], PodManager], make_netns: Callable[[], str]
) -> None:
    pods = node()
    reconcile(pods)
    netns = make_netns()
    record = pods.add(request("ADD", netns, "cut"))
    subprocess.run(["ip", "link", "del", host_link(pods, "cut")], check=True)  # pod's eth0 too
    assert pods.live_problems(record)

    report = reconcile(node())
    assert report.repaired == [str(record.key)] and report.damaged == {}, report.to_json()
    current = pods.store.get_pod(1, record.key)
    assert current is not None and current.addresses == record.addresses
    assert pods.live_problems(current) == []
    assert ping(netns, str(pods.pools.gateways[0]))

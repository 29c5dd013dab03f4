"""Replacing a pod's stale sandbox takes two attachments' locks: never in an order that can
deadlock (issue 15, defect 4).

Plan: two sandboxes of one pod (same namespace/name, no UID) are known in memory but not in
etcd, and both are ADDed again at the same time, each request meeting the other after it holds
its own attachment's lock (a rendezvous in the store's first read): both ADDs answer, and one
sandbox is left, wired, with its address allocated and nothing leaked.

Real pieces in this process (tests/integration/lifecycle): the session's etcd, the kernel
dataplane in this machine's namespace, the pods' sides in fresh test namespaces.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.lifecycle.pods import PodManager
from agent.lifecycle.reconcile import reconcile
from agent.model.errors import CniError
from agent.model.pod import PodKey, PodRecord
from tests.integration.lifecycle import host_link, in_use, link_live, managers, request

SUBNET = "10.237.0.0/16"


class Rendezvous:
    """The store, except that each thread's first read waits (up to 3 s) for the other's."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self._barrier = threading.Barrier(2, timeout=3)
        self._met: set[int] = set()

    def get_pod(self, node_id: int, key: PodKey) -> PodRecord | None:
        if threading.get_ident() not in self._met:
            self._met.add(threading.get_ident())
            # broken: the other request waits for a lock this one holds (the right outcome)
            with contextlib.suppress(threading.BrokenBarrierError):
                self._barrier.wait()
        record: PodRecord | None = self._real.get_pod(node_id, key)
        return record

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@pytest.fixture
def node(etcd_endpoints: list[str], tmp_path: Path) -> Iterator[Callable[[], PodManager]]:
    with managers(etcd_endpoints, tmp_path / "state", SUBNET) as make:
        yield make


def test_concurrent_readds_of_two_stale_sandboxes_do_not_deadlock(
    node: Callable[[], PodManager], make_netns: Callable[[], str]
) -> None:
    pods = node()
    reconcile(pods)
    sandboxes = {"sandbox-a": make_netns(), "sandbox-b": make_netns()}
    pods.load(
        PodRecord(container_id=cid, ifname="eth0", netns=netns, addresses=[], gateways=[],
                  pod_namespace="ns", pod_name="web", state="ready")
        for cid, netns in sandboxes.items()
    )
    real_store = pods.store
    pods.store = Rendezvous(real_store)
    answers: dict[str, str] = {}

    def readd(cid: str) -> None:
        try:
            pods.add(request("ADD", sandboxes[cid], cid, pod_name="web"))
            answers[cid] = "ok"
        except CniError as exc:
            answers[cid] = f"code {exc.code}: {exc}"

    threads = [threading.Thread(target=readd, args=(c,), daemon=True) for c in sandboxes]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), f"ADDs deadlocked; answered: {answers}"
    pods.store = real_store

    assert answers == {"sandbox-a": "ok", "sandbox-b": "ok"}, answers
    left = [r.container_id for r in real_store.list_pods(1)]
    assert len(left) == 1, left  # the later sandbox replaced the earlier one
    assert link_live(host_link(pods, left[0]))
    assert in_use(pods) == 1
    assert len(real_store.list_allocations(1)) == 1  # type: ignore[attr-defined]
    for cid, netns in sandboxes.items():
        pods.delete(request("DEL", netns, cid, pod_name="web"))
    assert in_use(pods) == 0 and real_store.list_pods(1) == []

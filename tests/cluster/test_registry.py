"""The registry on a real etcd (loopback) and the controller against an in-memory mesh.

Test plan: publish/list/delete round trip and the revision; the watch delivers puts and deletes;
a watch from a compacted revision ends in an error (the controller then relists); removal
deletes the entry, both node ID keys, pod records and allocations and nothing of another node,
and is refused while the node's liveness lease holds; the controller programs every remote node,
reprograms a changed one, unprograms a removed one, prunes at start what no node explains, and
keeps failed nodes visible with the reason, and notices the removal of its own node, but takes
an etcd that went back in time (wiped, restored) for data loss: it publishes itself again.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator

import pytest

from agent.cluster.controller import MeshController
from agent.infra.watchstream import Delete, Put, WatchEnded, WatchExpired
from agent.model.errors import CniError
from agent.model.node import NodeInfo, local_node
from agent.model.pod import PodRecord
from agent.state.node_removal import RemoveRefused, remove_node
from agent.state.registry import Registry
from agent.state.store import Store
from ipam import IPAMConfig, node_networks
from testbed.etcd import EtcdServer

CFG = IPAMConfig()


def info(node_id: int, name: str = "") -> NodeInfo:
    return local_node(name or f"n{node_id}", f"192.168.16.{node_id}", node_networks(CFG, node_id))


@pytest.fixture
def registry(etcd_endpoints: list[str]) -> Iterator[Registry]:
    reg = Registry(Store(etcd_endpoints, f"/reg-test-{secrets.token_hex(4)}/"))
    yield reg
    reg.close()


def test_publish_list_watch(registry: Registry) -> None:
    registry.publish(info(1))
    nodes, revision = registry.entries()
    assert nodes == {1: info(1)} and revision > 0
    stream = registry.watch(revision)
    try:
        registry.publish(info(2))
        registry.delete_node("n2", 2, name_held=False)
        seen: list[tuple[int, NodeInfo | None]] = []
        while len(seen) < 2:
            event = stream.next(timeout=10)
            assert isinstance(event, Put | Delete), event
            seen.append((event.key, event.value if isinstance(event, Put) else None))
        assert seen == [(2, info(2)), (2, None)]
    finally:
        stream.close()


def test_watch_from_a_compacted_revision_fails(registry: Registry) -> None:
    registry.publish(info(1))
    _, old = registry.entries()
    registry.publish(info(1, "renamed"))
    _, now = registry.entries()
    registry.store.etcd.compact(now)
    try:  # etcd refuses either at creation or by cancelling the created watch
        stream = registry.watch(old - 1)  # from revision `old` on
    except WatchExpired:
        return
    try:
        with pytest.raises(WatchEnded):
            stream.next(timeout=10)
    finally:
        stream.close()


def test_remove_node_deletes_its_keys_only(registry: Registry) -> None:
    for name in ("a", "b"):
        node_id = registry.store.claim_node_id(name, 10)
        registry.publish(info(node_id, name))
        record = PodRecord(container_id=f"c-{name}", ifname="eth0", netns="/x",
                           addresses=[f"10.1.{node_id}.2/32"], gateways=[])
        registry.store.put_pod(node_id, record)
    lease = registry.grant_alive(1)
    with pytest.raises(RemoveRefused, match="is live"):
        remove_node(registry, "a")
    registry.revoke_alive(lease)
    assert remove_node(registry, "a") == 1
    assert registry.store.node_ids() == {"b": 2}
    assert registry.store.list_pods(1) == [] and registry.store.list_allocations(1) == {}
    assert len(registry.store.list_pods(2)) == 1 and set(registry.entries()[0]) == {2}
    with pytest.raises(RemoveRefused, match="not in the cluster"):
        remove_node(registry, "a")
    assert registry.store.claim_node_id("c", 10) == 1  # the freed ID goes to the next node


class FakeMesh:
    """An in-memory MeshDataplane: the remote nodes it holds; `fail` names refused IDs."""

    def __init__(self, held: dict[int, NodeInfo]) -> None:
        self.held = dict(held)
        self.fail: set[int] = set()
        self.lock = threading.Lock()

    def check_mtu(self, local: NodeInfo) -> None:
        pass

    def program(self, local: NodeInfo, remote: NodeInfo) -> None:
        if remote.node_id in self.fail:
            raise RuntimeError("refused by the test")
        with self.lock:
            self.held[remote.node_id] = remote

    def unprogram(self, local: NodeInfo, remote: NodeInfo, keep: list[NodeInfo]) -> list[str]:
        return self.prune(local, keep)

    def prune(self, local: NodeInfo, keep: list[NodeInfo]) -> list[str]:
        with self.lock:
            gone = [i for i in self.held if self.held[i] not in keep]
            for node_id in gone:
                del self.held[node_id]
        return [str(i) for i in gone]


def wait(check: object, what: str) -> None:
    deadline = time.monotonic() + 15
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_controller_follows_the_registry(registry: Registry) -> None:
    registry.publish(info(2))
    mesh = FakeMesh({9: info(9)})  # a leftover of a node removed while "we" were down
    mesh.fail.add(3)
    controller = MeshController(registry, info(1), mesh, resync=30, retry=0.2)
    controller.start()
    try:
        wait(lambda: mesh.held == {2: info(2)}, "programmed n2, pruned n9")
        registry.publish(info(3))
        wait(lambda: _state(controller, "n3") == "failed", "n3 failed")
        mesh.fail.clear()
        wait(lambda: _state(controller, "n3") == "programmed", "n3 retried")
        moved = NodeInfo(**{**info(2).__dict__, "node_ip": "192.168.16.99"})
        registry.publish(moved)
        wait(lambda: mesh.held.get(2) == moved, "n2 reprogrammed")
        registry.delete_node("n3", 3, name_held=False)
        wait(lambda: set(mesh.held) == {2}, "n3 unprogrammed")
        snap = controller.snapshot()
        assert [n["name"] for n in snap["nodes"]] == ["n1", "n2"]
        assert snap["nodes"][0]["mesh"]["state"] == "local"
        assert not controller.removed.is_set()
        registry.delete_node("n1", 1, name_held=False)  # the operator removes this node
        wait(controller.removed.is_set, "own removal noticed")
        assert set(mesh.held) == {2}  # the mesh to the others stays for pods still here
    finally:
        controller.stop()


def _state(controller: MeshController, name: str) -> str:
    for node in controller.snapshot()["nodes"]:
        if node["name"] == name:
            return str(node.get("mesh", {}).get("state", ""))
    return ""


def test_controller_takes_an_etcd_wipe_for_data_loss_not_removal() -> None:
    """etcd wiped (or restored from an old backup): the relist's revision went back, so the
    missing entries were not removed by an operator: this node publishes itself again and keeps
    its mesh to the others until they are back (issue 15, defect 2)."""
    with EtcdServer() as etcd:
        registry = Registry(Store(etcd.endpoints, "/wipe-test/"))
        try:
            registry.publish(info(2))
            mesh = FakeMesh({})
            controller = MeshController(registry, info(1), mesh, resync=30, retry=0.2)
            controller.start()
            try:
                wait(lambda: mesh.held == {2: info(2)}, "programmed n2")
                etcd.wipe()
                wait(lambda: 1 in _entries(registry), "this node published again")
                assert not controller.removed.is_set()
                assert mesh.held == {2: info(2)}, "the mesh to n2 dropped while n2 comes back"
                registry.publish(info(2))  # n2's own agent publishes itself again
                wait(lambda: _state(controller, "n2") == "programmed", "n2 still programmed")
            finally:
                controller.stop()
        finally:
            registry.close()


def _entries(registry: Registry) -> dict[int, NodeInfo]:
    try:
        return registry.entries()[0]
    except CniError:
        return {}


def test_own_entry_gone_without_a_removal_mark_is_published_again() -> None:
    """This node's entry vanishes without the mark `node remove` leaves (etcd lost it; e.g.
    wiped and written past this agent's revision by others, so the revision did not go back):
    data loss, not an operator's removal: published again, the agent keeps taking pods."""
    with EtcdServer() as etcd:
        registry = Registry(Store(etcd.endpoints, "/lost-entry-test/"))
        try:
            mesh = FakeMesh({})
            controller = MeshController(registry, info(1), mesh, resync=30, retry=0.2)
            controller.start()
            try:
                wait(lambda: 1 in _entries(registry), "this node published")
                registry.store.etcd.delete(registry.store.keys.entry(1))  # lost, no removal mark
                wait(lambda: 1 in _entries(registry), "this node published again")
                assert not controller.removed.is_set()
            finally:
                controller.stop()
        finally:
            registry.close()

"""The mesh controller's rounds against a scripted registry: no etcd, no thread, no timer.

Each `controller.nodes.run_once()` is one round of its list + watch: the scripted registry
answers the next listing, and its watch ends at once, so the next round relists.

Plan: the first list publishes this node and programs the others; an etcd that went back (a
listing at a lower revision) is data loss: this node publishes again, the missing nodes stay
programmed, and the next relist that still lacks them removes them; what changed between two
lists is programmed and removed like watch events, and leftovers are pruned.
"""

from __future__ import annotations

from collections import deque

from agent.cluster.controller import MeshController
from agent.infra.watchstream import Listing, WatchEnded
from agent.model.node import NodeInfo
from tests.cluster.test_registry import FakeMesh, info


class EndedStream:
    def next(self, timeout: float) -> None:
        raise WatchEnded("ended by the test")

    def close(self) -> None:
        pass


class ScriptedRegistry:
    def __init__(self, *listings: tuple[int, list[NodeInfo]]) -> None:
        self.listings = deque(Listing({n.node_id: n for n in nodes}, revision)
                              for revision, nodes in listings)
        self.published: list[NodeInfo] = []

    def listing(self) -> Listing[int, NodeInfo, int]:
        return self.listings.popleft()

    def watch(self, after: int) -> EndedStream:
        return EndedStream()

    def publish(self, info: NodeInfo) -> None:
        self.published.append(info)

    def removal_marked(self, node_name: str) -> bool:
        return False


def test_an_etcd_that_went_back_keeps_the_mesh_until_the_next_relist() -> None:
    me, n2, n3 = info(1), info(2), info(3)
    registry = ScriptedRegistry((50, [me, n2, n3]), (7, [n2]), (9, [me, n2]))
    mesh = FakeMesh({})
    controller = MeshController(registry, me, mesh)
    controller.nodes.run_once()
    assert mesh.held == {2: n2, 3: n3} and registry.published == [me]
    controller.nodes.run_once()  # revision 50 -> 7: wiped or restored, not removed
    assert mesh.held == {2: n2, 3: n3} and registry.published == [me, me]
    assert not controller.removed.is_set()
    controller.nodes.run_once()  # n3 did not come back
    assert mesh.held == {2: n2} and registry.published == [me, me]


def test_relisted_changes_are_programmed_and_removed() -> None:
    me, n2, n3 = info(1), info(2), info(3)
    moved = NodeInfo(**{**n2.__dict__, "node_ip": "192.168.16.99"})
    registry = ScriptedRegistry((5, [me, n2, n3]), (8, [me, moved]))
    mesh = FakeMesh({9: info(9)})  # a leftover: pruned by the first relist
    controller = MeshController(registry, me, mesh)
    controller.nodes.run_once()
    assert mesh.held == {2: n2, 3: n3}
    controller.nodes.run_once()
    assert mesh.held == {2: moved}
    snapshot = controller.snapshot()
    assert snapshot["revision"] == 8 and snapshot["registryError"] == ""
    assert [n["mesh"]["state"] for n in snapshot["nodes"]] == ["local", "programmed"]

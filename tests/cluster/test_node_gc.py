"""Nodes deleted from the Kubernetes API leave the cluster (agent/cluster/node_gc), on a real
etcd registry.

Test plan:
- nothing happens before the cache has listed Nodes, nor to this node's own entry, nor to a node
  the API has;
- a node without a Node is freed only after the grace period (virtual time), with its pod
  records and allocations, and its ID goes to the next node;
- a Node that comes back during the grace period resets the count;
- a node with pods still bound to it in the API waits for them;
- a node whose agent is alive is never removed (a NodeName the API does not know).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from agent.cluster.node_gc import NodeCollector
from agent.model.node import NodeInfo, local_node
from agent.model.pod import PodRecord
from agent.state.registry import Registry
from agent.state.store import Store
from ipam import IPAMConfig, node_networks

CFG = IPAMConfig()


class World:
    """The API's Nodes and pods per node, and the time, as the test sets them."""

    def __init__(self) -> None:
        self.synced = True
        self.nodes: set[str] = {"me", "gone"}
        self.pods: dict[str, int] = {}
        self.now = 1000.0


@pytest.fixture
def registry(etcd_endpoints: list[str]) -> Iterator[Registry]:
    reg = Registry(Store(etcd_endpoints, f"/gc-test-{secrets.token_hex(4)}/"))
    for name in ("me", "gone"):
        node_id = reg.store.claim_node_id(name, 10)
        reg.publish(_info(node_id, name))
        reg.store.put_pod(node_id, PodRecord(container_id=f"c-{name}", ifname="eth0",
                                             netns="/x", addresses=[f"10.1.{node_id}.2/32"],
                                             gateways=[]))
    yield reg
    reg.close()


def _info(node_id: int, name: str) -> NodeInfo:
    return local_node(name, f"192.168.16.{node_id}", node_networks(CFG, node_id))


def _collector(registry: Registry, world: World, grace: float = 300.0) -> NodeCollector:
    return NodeCollector(registry, "me", lambda: world.nodes,
                         lambda name: world.pods.get(name, 0), lambda: world.synced,
                         grace=grace, clock=lambda: world.now)


def _names(registry: Registry) -> set[str]:
    return {n.name for n in registry.entries()[0].values()}


def test_a_deleted_node_is_freed_after_the_grace_period(registry: Registry) -> None:
    world = World()
    gc = _collector(registry, world)
    assert gc.run_once() == []
    world.nodes = {"me"}  # `gone`'s Node is deleted
    world.synced = False
    assert gc.run_once() == []  # not listed: no proof of absence, and no clock started
    world.synced = True
    assert gc.run_once() == [] and _names(registry) == {"me", "gone"}
    world.now += 299
    assert gc.run_once() == []
    world.now += 2
    assert gc.run_once() == ["gone"]
    assert _names(registry) == {"me"}
    assert registry.store.node_ids() == {"me": 1}
    assert registry.store.list_pods(2) == [] and registry.store.list_allocations(2) == {}
    assert len(registry.store.list_pods(1)) == 1  # this node's own records are untouched
    assert registry.store.claim_node_id("new", 10) == 2


def test_a_node_that_comes_back_starts_the_count_again(registry: Registry) -> None:
    world = World()
    gc = _collector(registry, world)
    world.nodes = {"me"}
    gc.run_once()
    world.now += 200
    world.nodes = {"me", "gone"}  # re-created
    gc.run_once()
    world.now += 200
    world.nodes = {"me"}
    assert gc.run_once() == []  # seen gone again now: the count starts here, not at 1000
    world.now += 299
    assert gc.run_once() == []
    world.now += 2
    assert gc.run_once() == ["gone"]


def test_pods_still_bound_keep_it_and_a_live_agent_keeps_it(registry: Registry) -> None:
    world = World()
    gc = _collector(registry, world, grace=0)
    world.nodes = {"me"}
    world.pods = {"gone": 2}
    assert gc.run_once() == [] and "gone" in _names(registry)
    world.pods = {}
    lease = registry.grant_alive(2)  # its agent runs, under a name the API does not know
    assert gc.run_once() == [] and "gone" in _names(registry)
    registry.revoke_alive(lease)
    assert gc.run_once() == ["gone"]


def test_this_nodes_own_entry_is_never_collected(registry: Registry) -> None:
    world = World()
    world.nodes = set()
    gc = _collector(registry, world, grace=0)
    assert gc.run_once() == ["gone"]
    assert _names(registry) == {"me"}

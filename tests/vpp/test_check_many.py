"""VppDataplane.check_many (reconcile's batch) against the fake VPP.

Plan: for a damaged pod (route gone), an intact one and one VPP never heard of, the batch answers
pod by pod what check() answers, and names each problem; with VPP away the batch fails as a whole
(TryAgainLater) and PodManager.live_problems_many then checks each pod on its own, so every pod
gets its own error instead of one failure hiding the rest.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.dataplane.undo import UndoStack
from agent.dataplane.vpp import VppDataplane, names
from agent.lifecycle.pods import PodManager
from agent.linux import pod_netns
from agent.model.errors import TryAgainLater
from agent.model.pod import CniRequest
from ipam import IPAMConfig, NodeAllocator, node_networks
from testbed.pods import vpp_pod as pod
from tests.fakevpp import FakeVPP
from tests.helpers.memstore import MemoryStore


def test_batch_answers_what_check_answers(
    fake: FakeVPP, driver_factory: Callable[..., VppDataplane], pod_ns: str, pod_ns2: str
) -> None:
    dp = driver_factory()
    dp.start()
    damaged, intact = pod(pod_ns, "10.1.1.21/32"), pod(pod_ns2, "10.1.1.22/32")
    unknown = pod(pod_ns2, "10.1.1.23/32", ifname="eth1")
    items = [(damaged, dp.attach(damaged, UndoStack())), (intact, dp.attach(intact, UndoStack()))]
    items.append((unknown, items[1][1]))
    with fake.lock:
        del fake.state.routes[(False, 1, "10.1.1.21/32")]

    batch = dp.check_many(items)

    assert batch == [dp.check(p, w) for p, w in items]
    sw = items[0][1].extra["sw_if_index"]
    assert batch[0] == [f"VPP route 10.1.1.21/32 via sw_if_index {sw} is missing"]
    assert batch[1] == []
    tag = names.pod_tag(unknown.key)
    assert batch[2] == [f"expected one VPP interface tagged {tag!r}, found 0"]


def test_vpp_away_gives_each_pod_its_own_error(
    fake: FakeVPP, driver_factory: Callable[..., VppDataplane], pod_ns: str, pod_ns2: str
) -> None:
    dp = driver_factory(use_tap=False)
    dp.start()
    pods = PodManager(1, MemoryStore(), dp, NodeAllocator(node_networks(IPAMConfig(), 1)), 1450,
                      pod_side=pod_netns)
    records = [pods.add(CniRequest("ADD", "1.0.0", c * 64, "eth0", ns, {}))
               for c, ns in (("e", pod_ns), ("f", pod_ns2))]
    assert pods.live_problems_many(records) == [[], []]
    fake.stop()
    try:
        found = pods.live_problems_many(records)
        assert len(found) == 2 and all(isinstance(f, TryAgainLater) for f in found), found
    finally:
        fake.start()
    assert pods.live_problems_many(records) == [[], []]

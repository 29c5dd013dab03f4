"""Reconcile on the VPP dataplane: live pods are kept, unrecorded VPP interfaces are removed.

Plan: after an agent "restart" (a new PodManager over the same store and VPP), reconcile keeps a
live pod wired exactly as before (its VPP interface name differs from its veth name, and real
container IDs are 64 characters, so the VPP tag is shortened: matching must go by the driver's
own tag), removes a tagged interface that no record explains together with its route and
neighbor, and removes an unfinished ADD's record and address.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agent.dataplane.undo import UndoStack
from agent.dataplane.vpp import VppDataplane, names
from agent.lifecycle.pods import PodManager
from agent.lifecycle.reconcile import reconcile
from agent.linux import iproute, pod_netns
from agent.model.pod import CniRequest, PodRecord
from ipam import IPAMConfig, NodeAllocator, node_networks
from testbed.pods import vpp_pod as pod
from tests.fakevpp import FakeVPP
from tests.helpers.memstore import MemoryStore

CONTAINER = "a" * 64  # a real runtime's container ID length


def manager(store: MemoryStore, dp: VppDataplane) -> PodManager:
    networks = node_networks(IPAMConfig(), 1)
    return PodManager(1, store, dp, NodeAllocator(networks), 1450, pod_side=pod_netns)


def test_reconcile_keeps_live_pods_and_removes_orphans(
    fake: FakeVPP, driver_factory: Callable[..., VppDataplane], pod_ns: str, pod_ns2: str
) -> None:
    dp = driver_factory(use_tap=False)
    dp.start()
    store = MemoryStore()
    first = manager(store, dp)
    live = first.add(CniRequest("ADD", "1.0.0", CONTAINER, "eth0", pod_ns, {}))
    orphan = pod(pod_ns2, "10.1.1.200/32")
    dp.attach(orphan, UndoStack())  # wired but never recorded (an agent died mid-ADD)
    unfinished = PodRecord("b" * 64, "eth0", pod_ns2, ["10.1.1.77/32"], ["10.1.1.1"],
                           state="adding", created=time.time())
    store.put_pod(1, unfinished)

    restarted = manager(store, driver_factory(use_tap=False))
    report = reconcile(restarted)

    assert report.live == 1 and not report.errors, report.to_json()
    assert restarted.live_problems(store.get_pod(1, live.key)) == []  # type: ignore[arg-type]
    assert fake.interface_by_tag(names.pod_tag(live.key)) is not None
    assert fake.interface_by_tag(names.pod_tag(orphan.key)) is None
    assert len(report.removed_orphans) == 1
    assert (1, "10.1.1.200/32") not in fake.routes(1)
    assert report.removed_unfinished == [str(unfinished.key)]
    assert store.get_pod(1, unfinished.key) is None
    assert "10.1.1.77/32" not in {a for (_, a) in store.allocations}


def _pod_ifindex(netns: str, ifname: str = "eth0") -> int | None:
    with iproute.Session.pod(netns) as links:
        return links.ifindex(ifname)


def test_vpp_restart_under_live_pods_repairs_them_without_an_agent_restart(
    fake: FakeVPP, driver_factory: Callable[..., VppDataplane], pod_ns: str, pod_ns2: str
) -> None:
    dp = driver_factory(use_tap=False)
    dp.start()
    store = MemoryStore()
    pods = manager(store, dp)
    reconcile(pods)
    records = [
        pods.add(CniRequest("ADD", "1.0.0", f"{c * 64}", "eth0", ns, {}))
        for c, ns in (("c", pod_ns), ("d", pod_ns2))
    ]
    before = [_pod_ifindex(r.netns) for r in records]
    generation = dp.generation()

    fake.restart()  # VPP forgets every interface, route and neighbor
    assert not dp.ready()  # the watch's probe notices the dead connection
    assert dp.ready() and dp.generation() == generation + 1  # and the next one reconnects
    assert all(pods.live_problems(r) for r in records)

    assert pods.repair_all() == {}
    for record, ifindex in zip(records, before, strict=True):
        current = store.get_pod(1, record.key)
        assert current is not None and pods.live_problems(current) == []
        # in place: the veth (and so the pod's interface, addresses, routes) survived
        assert _pod_ifindex(record.netns) == ifindex
        assert fake.interface_by_tag(names.pod_tag(record.key)) is not None


def test_tap_pods_are_rewired_from_scratch_after_a_vpp_restart(
    fake: FakeVPP, driver_factory: Callable[..., VppDataplane], pod_ns: str, vhost_net: str
) -> None:
    dp = driver_factory(use_tap=True, vhost_net_path=vhost_net)
    dp.start()
    store = MemoryStore()
    pods = manager(store, dp)
    reconcile(pods)
    record = pods.add(CniRequest("ADD", "1.0.0", "e" * 64, "eth0", pod_ns, {}))
    fake.restart()  # the TAP's kernel end dies with VPP
    assert not dp.ready() and dp.ready()
    assert pods.repair_all() == {}
    current = store.get_pod(1, record.key)
    assert current is not None and pods.live_problems(current) == []
    assert current.addresses == record.addresses

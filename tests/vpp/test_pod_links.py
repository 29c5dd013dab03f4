"""Reused veth host names in veth + AF_PACKET mode, against the fake VPP (issue #27).

VPP keeps strings per interface name for good, so the pods' host ends take the lowest free name
of a small set (`vswp<N>`, agent/dataplane/vpp/podlinks) instead of one derived from the pod key.
Plan:
- names are reused: a DEL frees its name and the next ADD takes the lowest free one;
- parallel ADDs (and parallel reservations) never get one name;
- a name someone else holds (a link not ours; a VPP interface left on a gone link) is skipped,
  and the other's link keeps its alias;
- a record an older agent wrote (`vsw<digest>` end) is checked, adopted after a VPP restart and
  deleted, in VPP's order; a DEL without a record finds such a link too;
- a DEL without a record (repeated DEL, restarted agent) finds the pod's link by its alias;
- orphans: a pod-tagged link of ours with no VPP interface is listed by owned() and removed.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable

from agent.dataplane.undo import UndoStack
from agent.dataplane.vpp import VppDataplane, afpacket, names
from agent.dataplane.vpp.podlinks import PodLinks
from agent.linux import netlink
from agent.model.pod import PodNetwork, Wiring
from testbed.netns import named_netns
from testbed.pods import vpp_pod as pod
from tests.fakevpp import FakeVPP

Factory = Callable[..., VppDataplane]


def started(driver_factory: Factory) -> VppDataplane:
    dp = driver_factory()
    dp.start()
    return dp


def test_a_deleted_pods_name_is_the_next_adds(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str, pod_ns2: str
) -> None:
    dp = started(driver_factory)
    a, b = pod(pod_ns, "10.1.1.50/32"), pod(pod_ns2, "10.1.1.51/32")
    wa, wb = dp.attach(a, UndoStack()), dp.attach(b, UndoStack())
    assert (wa.host_ifname, wb.host_ifname) == ("vswp0", "vswp1")
    dp.detach(a, wa)
    dp.veth.reaper.drain()  # the name is free once the veth is gone
    assert not netlink.link_exists("vswp0") and netlink.link_exists("vswp1")
    with named_netns("tvp") as ns:
        c = pod(ns, "10.1.1.52/32")
        wc = dp.attach(c, UndoStack())
        assert wc.host_ifname == "vswp0"  # reused: VPP has seen the name before
        assert dp.check(c, wc) == [] and dp.check(b, wb) == []
        dp.detach(c, wc)
    dp.detach(b, wb)
    assert fake.log() == [] and dp.owned() == {}


def test_parallel_adds_never_share_a_name(fake: FakeVPP, driver_factory: Factory) -> None:
    dp = started(driver_factory)
    count = 6
    wired: list[tuple[PodNetwork, Wiring]] = []
    errors: list[BaseException] = []
    with named_netns("tvp") as n0, named_netns("tvp") as n1, named_netns("tvp") as n2, \
            named_netns("tvp") as n3, named_netns("tvp") as n4, named_netns("tvp") as n5:
        pods = [pod(ns, f"10.1.1.{60 + i}/32") for i, ns in enumerate((n0, n1, n2, n3, n4, n5))]
        gate = threading.Barrier(count)

        def add(p: PodNetwork) -> None:
            try:
                gate.wait()
                wired.append((p, dp.attach(p, UndoStack())))
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=add, args=(p,)) for p in pods]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert sorted(w.host_ifname for _, w in wired) == [f"vswp{i}" for i in range(count)]
        for p, w in wired:
            assert dp.check(p, w) == []
            dp.detach(p, w)
    assert fake.log() == [] and dp.owned() == {}


def test_parallel_reservations_are_distinct(node_ns: str) -> None:
    links = PodLinks("vswq")
    got: list[str] = []
    gate = threading.Barrier(8)

    def take(n: int) -> None:
        gate.wait()
        got.extend(links.reserve(f"vswitch-cni:c{n}:eth0") for _ in range(25))

    threads = [threading.Thread(target=take, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got, key=lambda n: int(n[4:])) == [f"vswq{i}" for i in range(200)]
    links.release("vswq7")
    assert links.reserve("vswitch-cni:again:eth0") == "vswq7"


def test_names_held_by_others_are_skipped(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str, pod_ns2: str
) -> None:
    dp = started(driver_factory)
    # vswp0: a link that is not ours, with an alias of its own.
    subprocess.run(["ip", "link", "add", "vswp0", "type", "veth", "peer", "name", "xq0"],
                   check=True)
    subprocess.run(["ip", "link", "set", "vswp0", "alias", "someone-else"], check=True)
    # vswp1: VPP kept an interface on a link of that name that is gone.
    subprocess.run(["ip", "link", "add", "vswp1", "type", "veth", "peer", "name", "xq1"],
                   check=True)
    afpacket.create(dp.api, "vswp1", names.base_mac("stale"), dp.cfg.afpacket)
    subprocess.run(["ip", "link", "del", "vswp1"], check=True)
    a = pod(pod_ns, "10.1.1.70/32")
    wa = dp.attach(a, UndoStack())
    assert wa.host_ifname == "vswp2" and dp.check(a, wa) == []
    assert netlink.links_with_alias_prefix("someone-else") == {"vswp0": "someone-else"}
    assert not netlink.link_exists("vswp1")  # the ADD's try on it left nothing
    b = pod(pod_ns2, "10.1.1.71/32")
    wb = dp.attach(b, UndoStack())
    assert wb.host_ifname == "vswp3"  # both stay skipped
    dp.detach(a, wa)
    dp.detach(b, wb)


def old_agents_pod(dp: VppDataplane, p: PodNetwork) -> Wiring:
    """Wires `p` as agents before issue #27 did: the host end named from the pod key."""
    legacy = names.digest_host_ifname(p.key)
    dp.links.reserve = lambda tag: legacy  # type: ignore[method-assign]
    try:
        wiring = dp.attach(p, UndoStack())
    finally:
        del dp.links.reserve
    assert wiring.host_ifname == legacy
    return wiring


def test_an_older_agents_record_is_checked_adopted_and_deleted(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    p = pod(pod_ns, "10.1.1.80/32")
    old = started(driver_factory)
    wiring = old_agents_pod(old, p)
    old.close()
    dp = started(driver_factory)  # the upgraded agent
    assert dp.check(p, wiring) == []
    fake.restart()
    assert any(dp.ready() for _ in range(3))
    restored = dp.restore(p, wiring)
    assert restored is not None and restored.host_ifname == wiring.host_ifname
    assert dp.check(p, restored) == []
    dp.detach(p, restored)
    dp.veth.reaper.drain()
    assert not netlink.link_exists(wiring.host_ifname)
    assert fake.log() == [] and dp.owned() == {}


def test_a_del_without_a_record_finds_old_and_new_links(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str, pod_ns2: str
) -> None:
    first = started(driver_factory)
    new, legacy = pod(pod_ns, "10.1.1.90/32"), pod(pod_ns2, "10.1.1.91/32")
    wn = first.attach(new, UndoStack())
    wl = old_agents_pod(first, legacy)
    first.close()
    again = started(driver_factory)  # a restarted agent, and no record (a repeated DEL)
    again.detach(new, None)
    again.detach(legacy, None)
    again.veth.reaper.drain()
    assert not netlink.link_exists(wn.host_ifname) and not netlink.link_exists(wl.host_ifname)
    assert fake.interface_by_tag(names.pod_tag(new.key)) is None
    assert fake.interface_by_tag(names.pod_tag(legacy.key)) is None
    assert fake.log() == [] and again.owned() == {}
    fake.requests.clear()
    again.detach(new, None)  # nothing left: no VPP request for the pod
    assert "af_packet_delete" not in fake.requests and "sw_interface_dump" not in fake.requests


def test_a_tagged_link_without_its_vpp_interface_is_an_orphan(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp = started(driver_factory)
    p = pod(pod_ns, "10.1.1.95/32")
    wiring = dp.attach(p, UndoStack())
    tag = names.pod_tag(p.key)
    itf = fake.interface_by_tag(tag)
    assert itf is not None
    dp._unwire_vpp(p, itf.sw_if_index)
    afpacket.delete(dp.api, wiring.host_ifname)  # a VPP that lost it (or an agent killed)
    again = started(driver_factory)
    assert again.owned() == {wiring.host_ifname: tag}
    again.remove_orphan(wiring.host_ifname)
    assert not netlink.link_exists(wiring.host_ifname) and again.owned() == {}
    # Its name is free again.
    assert again.attach(p, UndoStack()).host_ifname == wiring.host_ifname


def test_a_retried_del_leaves_the_name_another_pod_took_alone(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str, pod_ns2: str
) -> None:
    dp = started(driver_factory)
    a, b = pod(pod_ns, "10.1.1.53/32"), pod(pod_ns2, "10.1.1.54/32")
    wa = dp.attach(a, UndoStack())
    dp.detach(a, wa)
    dp.veth.reaper.drain()
    wb = dp.attach(b, UndoStack())
    assert wb.host_ifname == wa.host_ifname  # the freed name, reused
    dp.detach(a, wa)  # the runtime retries a's DEL (its answer was lost), with a's record
    assert dp.check(b, wb) == []
    assert netlink.link_exists(wb.host_ifname) and dp.pending_link_deletes() == 0
    dp.detach(b, wb)
    dp.veth.reaper.drain()
    assert fake.log() == [] and dp.owned() == {}

"""The pool of ready veth + AF_PACKET pairs and DEL's background deletes, against the fake VPP
(issue #25; agent/dataplane/vpp/podpool).

The pool is started without its loop, so each test drives it by hand (`refill`,
`delete_retired`) and sees every state in between. Plan:
- an ADD takes a spare: VPP is asked for no AF_PACKET interface, the pod's interface is a
  passthru macvlan on the waiting end, made in the pod under the requested name with the pod's
  MAC, the pair stays in the node's namespace and is the pod's (tags), CHECK passes; `refill`
  makes another; with the node mesh the waiting end segments IPv4 TCP (TSO off on it);
- an empty pool: the ADD makes its pair as without a pool; so does every ADD on a kernel
  without macvlans, which gets no pool at all;
- an empty pool while the loop is making a spare: the ADD waits for that one instead of asking
  VPP for a pair of its own (VPP would make the two one after the other anyway);
- a failed ADD that took a spare leaves nothing (VPP's interface and the veth gone, in VPP's
  order); an interface name taken in the pod fails as before and leaves the pod's link alone;
- DEL answers with VPP's interface routeless and the waiting end down (the pod's macvlan
  without a link), before any af_packet_delete; the pod's namespace can go then without taking
  the veth; with the pool full, the background delete removes VPP's interface, then the veth;
- a DEL's pair serves the next pod (pairs.py): the macvlan deleted in the namespace the DEL
  held (the runtime removed its path), both tags spare again, and no AF_PACKET create or
  delete in VPP; not a pair of an older VPP connection; an ADD into the namespace of a retired
  pair gets the name back first (the pair serves again, or goes when the pool is full); a
  retried DEL leaves alone the pair a newer pod got under the same name; a pod wired by an
  earlier version (the waiting end itself moved into the pod) has that end taken back;
- an agent killed with spares and a retired pair: the next one never lists them as pods'
  objects, and deletes them all, in order;
- a VPP restart: the spares it forgot are deleted (no af_packet_delete for them), an ADD does
  not take one, and the pool is made again;
- `--teardown` removes spares too.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.dataplane.undo import UndoStack
from agent.dataplane.vpp import VppDataplane, afpacket, names
from agent.dataplane.vpp.podpool import PodPool
from agent.linux import ethtool, netlink
from agent.model.errors import DataplaneFailure, InvalidEnvironment
from testbed.netns import named_netns, unique
from testbed.pods import vpp_pod as pod
from tests.fakevpp import FakeVPP

Factory = Callable[..., VppDataplane]


def pooled(driver_factory: Factory, size: int = 2, fill: bool = True) -> tuple[VppDataplane,
                                                                              PodPool]:
    dp = driver_factory(pod_pool=size)
    assert dp.pool is not None
    dp.pool.start(loop=False)  # driven by hand below; dp.start() leaves it so
    dp.start()
    if fill:
        dp.pool.refill()
    return dp, dp.pool


def links_in(netns: str) -> list[str]:
    out = subprocess.run(["ip", "-n", netns.rsplit("/", 1)[-1], "-o", "link"],
                         capture_output=True, text=True, check=True).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]


def link_json(name: str, netns: str = "") -> dict[str, Any]:
    where = ["-n", netns.rsplit("/", 1)[-1]] if netns else []
    out = subprocess.run(["ip", *where, "-d", "-j", "link", "show", name],
                         capture_output=True, text=True, check=True).stdout
    found: dict[str, Any] = json.loads(out)[0]
    return found


def spares_in_vpp(fake: FakeVPP) -> list[str]:
    return sorted(i.host_if_name for i in fake.interfaces().values() if i.tag == names.SPARE_TAG)


def test_an_add_takes_a_spare_and_the_pool_refills(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp, pool = pooled(driver_factory)
    assert spares_in_vpp(fake) == ["vswp0", "vswp1"]
    assert netlink.link_exists("vsws0") and netlink.link_exists("vsws1")  # waiting, node ns
    p = pod(pod_ns, "10.1.1.70/32")
    fake.requests.clear()
    wiring = dp.attach(p, UndoStack())
    assert "af_packet_create_v3" not in fake.requests
    assert wiring.host_ifname == "vswp0" and pool.ready() == 1
    assert pool.take_counts() == {"ready": 1, "waited": 0, "empty": 0}
    eth0 = link_json("eth0", pod_ns)
    assert eth0["linkinfo"]["info_kind"] == "macvlan"
    assert eth0["linkinfo"]["info_data"]["mode"] == "passthru"
    assert eth0["address"] == names.pod_mac(p.key) and eth0["mtu"] == dp.cfg.mtu
    waiting = link_json("vsws0")  # the macvlan's link, still in the node's namespace, up
    assert eth0["link_index"] == waiting["ifindex"] and "UP" in waiting["flags"]
    assert Path("/proc/sys/net/ipv6/conf/vsws0/disable_ipv6").read_text().strip() == "1"
    assert ethtool.feature(None, "vsws0", "tx-tcp-segmentation")  # no node mesh here
    itf = fake.interface_by_tag(names.pod_tag(p.key))
    assert itf is not None and itf.host_if_name == "vswp0" and itf.mac == wiring.gateway_mac
    assert dp.links.name_of(names.pod_tag(p.key)) == "vswp0"
    assert dp.check(p, wiring) == []
    pool.refill()
    assert pool.ready() == 2 and spares_in_vpp(fake) == ["vswp1", "vswp2"]
    assert dp.owned() == {itf.name: names.pod_tag(p.key)}  # spares are nobody's orphans


def test_an_empty_pool_falls_back_to_making_the_pair(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp, pool = pooled(driver_factory, fill=False)
    p = pod(pod_ns, "10.1.1.71/32")
    wiring = dp.attach(p, UndoStack())
    assert "af_packet_create_v3" in fake.requests and pool.ready() == 0
    assert dp.check(p, wiring) == []
    assert pool.take_counts() == {"ready": 0, "waited": 0, "empty": 1}


def test_a_kernel_without_macvlans_gets_no_pool(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[bool] = []

    def no_macvlans() -> bool:
        asked.append(False)
        return False

    monkeypatch.setattr(netlink, "macvlan_supported", no_macvlans)
    dp = driver_factory(pod_pool=4)
    assert asked == []  # a driver only made (--teardown's) asks nothing, creates no link
    dp.start()
    assert asked == [False]
    assert dp.pool is None and dp.veth.pool is None  # as with VppPodPool 0
    assert spares_in_vpp(fake) == [] and not netlink.link_exists("vsws0")
    p = pod(pod_ns, "10.1.1.78/32")
    wiring = dp.attach(p, UndoStack())
    assert "af_packet_create_v3" in fake.requests
    assert link_json("eth0", pod_ns).get("linkinfo", {}).get("info_kind") == "veth"
    assert dp.check(p, wiring) == []


def test_an_add_waits_for_the_spare_being_made(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp, pool = pooled(driver_factory, size=1, fill=False)
    p = pod(pod_ns, "10.1.1.79/32")
    wired: list[str] = []
    errors: list[BaseException] = []

    def run(work: Callable[[], object]) -> threading.Thread:
        def body() -> None:
            try:
                work()
            except BaseException as exc:  # reported below
                errors.append(exc)
        thread = threading.Thread(target=body)
        thread.start()
        return thread

    fake.requests.clear()
    with fake.lock:  # VPP answers nothing until released: the spare stays "being made"
        maker = run(pool.refill)
        while not netlink.link_exists("vswp0") and maker.is_alive():
            maker.join(0.01)  # its veth is made before VPP is asked for the interface
        adder = run(lambda: wired.append(dp.attach(p, UndoStack()).host_ifname))
    maker.join()
    adder.join()
    assert errors == []
    assert wired == ["vswp0"] and fake.requests.count("af_packet_create_v3") == 1
    # waited for, or taken ready if the ADD came after the spare was made: never "empty"
    counts = pool.take_counts()
    assert counts["empty"] == 0 and counts["ready"] + counts["waited"] == 1, counts


def test_a_failed_add_with_a_spare_leaves_nothing(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp, pool = pooled(driver_factory, size=1)
    p = pod(pod_ns, "10.1.1.72/32")
    fake.fail_once("ip_route_add_del", -1)
    undo = UndoStack()
    with pytest.raises(DataplaneFailure):
        dp.attach(p, undo)
    assert undo.unwind() == []
    assert fake.interface_by_tag(names.pod_tag(p.key)) is None
    assert [i for i in fake.interfaces().values() if i.host_if_name == "vswp0"] == []
    assert not netlink.link_exists("vswp0") and not netlink.link_exists("vsws0")
    assert "eth0" not in links_in(pod_ns) and fake.log() == []
    assert not any("10.1.1.72" in prefix for _, prefix in fake.routes(1))
    assert pool.ready() == 0 and dp.owned() == {}


def test_a_taken_interface_name_fails_and_leaves_the_pods_link(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp, _ = pooled(driver_factory, size=1)
    ns = pod_ns.rsplit("/", 1)[-1]
    subprocess.run(["ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name",
                    "other"], check=True)
    p = pod(pod_ns, "10.1.1.73/32")
    undo = UndoStack()
    with pytest.raises(InvalidEnvironment, match="already exists"):
        dp.attach(p, undo)
    undo.unwind()
    assert sorted(links_in(pod_ns)) == ["eth0", "lo", "other"]
    assert not netlink.link_exists("vswp0") and spares_in_vpp(fake) == []
    assert fake.log() == []


def test_del_answers_before_the_af_packet_delete_which_comes_before_the_veths(
    fake: FakeVPP, driver_factory: Factory
) -> None:
    dp, pool = pooled(driver_factory, size=1)
    name = unique("tvg")
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        p = pod(f"/var/run/netns/{name}", "10.1.1.74/32")
        wiring = dp.attach(p, UndoStack())
        itf = fake.interface_by_tag(names.pod_tag(p.key))
        assert itf is not None
        fake.requests.clear()
        dp.detach(p, wiring)
        assert "af_packet_delete" not in fake.requests
        # unreachable at once: no route, no neighbor (VPP's interface stays admin up: down,
        # VPP would set the veth down under its own socket, which the fake logs)
        assert not any("10.1.1.74" in prefix for _, prefix in fake.routes(1))
        assert not any(ip == "10.1.1.74" for _, ip in fake.neighbors())
        retired = fake.interfaces()[itf.sw_if_index]
        assert retired.tag == names.RETIRED_TAG and fake.log() == []
        # cut off: the macvlan's link is down; the pair is in the node's namespace, whatever
        # becomes of the pod's
        assert "UP" not in link_json("vsws0")["flags"]
        assert link_json("eth0", p.netns)["link_index"] == link_json("vsws0")["ifindex"]
        assert pool.retiring() == {"vswp0"} and dp.owned() == {}
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)
    assert netlink.link_exists("vswp0")  # survived its pod's namespace
    pool.refill()
    pool.recycle()  # the pool is full again: the pair does not serve again, it goes
    pool.delete_retired()
    assert fake.requests.count("af_packet_delete") == 1
    assert not netlink.link_exists("vswp0") and not netlink.link_exists("vsws0")
    assert itf.sw_if_index not in fake.interfaces()
    assert fake.log() == []  # VPP's interface went while its device was still there
    assert pool.retiring() == set() and pool.hosts() == ["vswp1"]


def test_a_killed_agents_spares_and_retired_pairs_are_deleted_not_adopted_as_pods(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    first, pool = pooled(driver_factory, size=2)
    p = pod(pod_ns, "10.1.1.75/32")
    first.detach(p, first.attach(p, UndoStack()))  # retired, its delete never ran
    pool.refill()
    assert spares_in_vpp(fake) == ["vswp1", "vswp2"] and pool.retiring() == {"vswp0"}
    first.pool = None  # killed: nothing of its close runs
    again = driver_factory(pod_pool=2)
    assert again.pool is not None
    again.pool.start(loop=False)
    again.start()
    assert again.owned() == {}  # what reconcile would remove as orphans: none of these
    assert again.pool.retiring() == {"vswp0", "vswp1", "vswp2"}
    again.pool.delete_retired()
    assert [i for i in fake.interfaces().values() if i.dev_type == afpacket.DEV_TYPE
            and i.host_if_name.startswith("vswp")] == []
    assert not any(netlink.link_exists(n) for n in ("vswp0", "vswp1", "vswp2", "vsws0"))
    assert fake.log() == []


def test_after_a_vpp_restart_stale_spares_go_and_the_pool_is_made_again(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp, pool = pooled(driver_factory, size=2)
    fake.restart()
    assert any(dp.ready() for _ in range(3))  # reconnected: a new generation
    p = pod(pod_ns, "10.1.1.76/32")
    fake.requests.clear()
    wiring = dp.attach(p, UndoStack())
    assert "af_packet_create_v3" in fake.requests  # no stale spare taken
    assert dp.check(p, wiring) == []
    fake.requests.clear()
    pool.refill()
    assert "af_packet_delete" not in fake.requests and fake.log() == []
    assert len(spares_in_vpp(fake)) == 2 and pool.ready() == 2


def test_teardown_removes_spares(fake: FakeVPP, driver_factory: Factory) -> None:
    dp, _ = pooled(driver_factory, size=2)
    dp.pool = None  # a stopped agent's spares, found by --teardown's driver
    removed = dp.teardown()
    assert "pair vswp0 (vswitch-cni/spare)" in removed
    assert spares_in_vpp(fake) == [] and not netlink.link_exists("vswp1")
    assert fake.log() == []


def test_a_second_pod_interface_name_in_one_namespace(
    fake: FakeVPP, driver_factory: Factory
) -> None:
    dp, pool = pooled(driver_factory, size=2)
    with named_netns("tvp") as ns:
        a, b = pod(ns, "10.1.1.77/32"), pod(ns, "10.1.1.78/32", ifname="net1")
        wa, wb = dp.attach(a, UndoStack()), dp.attach(b, UndoStack())
        assert sorted(links_in(ns)) == ["eth0", "lo", "net1"]
        dp.detach(a, wa)
        assert dp.check(b, wb) == [] and pool.retiring() == {wa.host_ifname}
        dp.detach(b, wb)
    pool.delete_retired()
    assert fake.log() == [] and dp.owned() == {}


def test_a_dels_pair_serves_the_next_pod_without_vpp_making_or_deleting_one(
    fake: FakeVPP, driver_factory: Factory
) -> None:
    dp, pool = pooled(driver_factory, size=1)
    with named_netns("tvp") as first_ns:
        first = pod(first_ns, "10.1.1.84/32")
        wired = dp.attach(first, UndoStack())
        itf = fake.interface_by_tag(names.pod_tag(first.key))
        assert itf is not None and pool.ready() == 0
        fake.requests.clear()
        dp.detach(first, wired)
    # the runtime removed the namespace at once; the DEL holds it until the macvlan is gone
    pool.recycle()
    assert pool.hosts() == [wired.host_ifname] and pool.retiring() == set()
    assert fake.interfaces()[itf.sw_if_index].tag == names.SPARE_TAG
    assert "UP" in link_json("vsws0")["flags"]
    with named_netns("tvp") as ns:
        second = pod(ns, "10.1.1.85/32")
        again = dp.attach(second, UndoStack())
        assert again.host_ifname == wired.host_ifname
        assert again.extra["sw_if_index"] == str(itf.sw_if_index)
        assert link_json("eth0", ns)["link_index"] == link_json("vsws0")["ifindex"]
        assert dp.check(second, again) == []
        assert not any("10.1.1.84" in prefix for _, prefix in fake.routes(1))
        dp.detach(second, again)
    assert "af_packet_create_v3" not in fake.requests
    assert "af_packet_delete" not in fake.requests and fake.log() == []


def test_an_add_into_the_namespace_of_a_retired_pair_gets_the_name_back_first(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    """The retired macvlan still holds the interface name: the ADD makes the pair a spare
    again (the pool wants one), or deletes it (the pool is full)."""
    dp, pool = pooled(driver_factory, size=2)
    p = pod(pod_ns, "10.1.1.80/32")
    first = dp.attach(p, UndoStack())
    dp.detach(p, first)
    assert pool.retiring() == {first.host_ifname} and "eth0" in links_in(pod_ns)
    fake.requests.clear()
    again = dp.attach(p, UndoStack())
    assert "af_packet_delete" not in fake.requests and pool.retiring() == set()
    assert dp.check(p, again) == [] and pool.hosts() == [first.host_ifname]
    dp.detach(p, again)
    pool.refill()  # full
    fake.requests.clear()
    third = dp.attach(p, UndoStack())
    assert fake.requests.count("af_packet_delete") == 1 and pool.retiring() == set()
    assert dp.check(p, third) == [] and fake.log() == []


def test_a_pair_of_an_older_vpp_connection_is_deleted_not_reused(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp, pool = pooled(driver_factory, size=1)
    p = pod(pod_ns, "10.1.1.86/32")
    wired = dp.attach(p, UndoStack())
    dp.detach(p, wired)
    fake.restart()
    assert any(dp.ready() for _ in range(3))  # reconnected: a new generation
    pool.recycle()
    assert pool.hosts() == [] and pool.retiring() == {wired.host_ifname}
    pool.delete_retired()
    assert not netlink.link_exists(wired.host_ifname) and "eth0" not in links_in(pod_ns)
    assert fake.log() == []


def test_a_retried_del_leaves_the_pair_a_newer_pod_got_under_the_same_name(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp, pool = pooled(driver_factory, size=1)
    old = pod(pod_ns, "10.1.1.81/32")
    wiring = dp.attach(old, UndoStack())
    dp.detach(old, wiring)
    pool.recycle()  # the same pair, name and VPP interface serve the next pod
    with named_netns("tvp") as ns:
        new = pod(ns, "10.1.1.82/32")
        newer = dp.attach(new, UndoStack())
        assert newer.host_ifname == wiring.host_ifname
        dp.detach(old, wiring)  # the runtime's retry of the first DEL
        assert dp.check(new, newer) == [] and pool.retiring() == set()
        assert "UP" in link_json(pool.peer_name(newer.host_ifname) or "")["flags"]
        dp.detach(new, newer)
    pool.refill()
    pool.recycle()
    pool.delete_retired()
    assert fake.log() == []


def test_a_pod_whose_waiting_end_was_moved_into_it_gets_that_end_taken_back(
    fake: FakeVPP, driver_factory: Factory
) -> None:
    """An earlier version's pool moved the waiting end itself into the pod; its DEL takes it
    back out before the pod's namespace can go (issue #27's order)."""
    dp, pool = pooled(driver_factory, size=1)
    name = unique("tvg")
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        p = pod(f"/var/run/netns/{name}", "10.1.1.83/32")
        wiring = dp.attach(p, UndoStack())
        subprocess.run(["ip", "-n", name, "link", "del", "eth0"], check=True)
        subprocess.run(["ip", "link", "set", "vsws0", "netns", name, "name", "eth0"],
                       check=True)  # as the earlier version left it
        assert not netlink.link_exists("vsws0")
        dp.detach(p, wiring)
        assert netlink.link_exists("vsws0") and links_in(p.netns) == ["lo"]
        assert pool.retiring() == {wiring.host_ifname}
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)
    pool.delete_retired()
    assert not netlink.link_exists("vsws0") and fake.log() == []


def test_with_vpps_own_wireguard_the_waiting_end_completes_checksums(
    fake: FakeVPP, driver_factory: Factory
) -> None:
    """VPP's wireguard plugin encrypts a packet whose checksum is still pending (the
    interconnect then writes it into the ciphertext): the pods' packets must reach VPP with
    their checksums done, which the macvlan's lower link does once its offload is off; its TSO
    goes with it, in both families. The interconnect's Linux end likewise."""
    dp = driver_factory(pod_pool=1, pod_tso4=False, pod_checksum=False)
    assert dp.pool is not None
    dp.pool.start(loop=False)
    dp.start()
    dp.pool.refill()
    for feature in ("tx-checksum-ip-generic", "tx-tcp-segmentation", "tx-tcp6-segmentation"):
        assert not ethtool.feature(None, "vsws0", feature), feature
    assert not ethtool.feature(None, dp.cfg.host_ifname, "tx-checksum-ip-generic")


def test_waiting_ends_made_before_are_switched_when_the_agent_starts(
    fake: FakeVPP, driver_factory: Factory
) -> None:
    """Encryption turned on in VPP (a restart with pod_checksum off): the waiting ends of the
    pods made before get their checksum offload switched off too, else their TCP through VPP's
    WireGuard would fail to decrypt on the other node."""
    before = driver_factory(pod_pool=1)
    assert before.pool is not None
    before.pool.start(loop=False)
    before.start()
    before.pool.refill()
    assert ethtool.feature(None, "vsws0", "tx-checksum-ip-generic")
    after = driver_factory(pod_pool=0, pod_tso4=False, pod_checksum=False)
    after.start()
    for feature in ("tx-checksum-ip-generic", "tx-tcp-segmentation", "tx-tcp6-segmentation"):
        assert not ethtool.feature(None, "vsws0", feature), feature


def test_with_the_node_mesh_the_waiting_end_segments_ipv4_tcp(
    fake: FakeVPP, driver_factory: Factory
) -> None:
    """A macvlan's TSO cannot be switched off (the kernel fixes it on); its lower link's can,
    and then the pod's IPv4 TCP is segmented there, before VPP reads it (docs/vpp.md)."""
    dp = driver_factory(pod_pool=1, pod_tso4=False)
    assert dp.pool is not None
    dp.pool.start(loop=False)
    dp.start()
    dp.pool.refill()
    assert not ethtool.feature(None, "vsws0", "tx-tcp-segmentation")
    assert ethtool.feature(None, "vsws0", "tx-tcp6-segmentation")

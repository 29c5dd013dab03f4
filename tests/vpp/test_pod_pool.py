"""The pool of ready veth + AF_PACKET pairs and DEL's background deletes, against the fake VPP
(issue #25; agent/dataplane/vpp/podpool).

The pool is started without its loop, so each test drives it by hand (`refill`,
`delete_retired`) and sees every state in between. Plan:
- an ADD takes a spare: VPP is asked for no AF_PACKET interface, the pod's end is in the pod
  under the requested name with the pod's MAC, the pair is the pod's (tags), CHECK passes;
  `refill` makes another;
- an empty pool: the ADD makes its pair as without a pool;
- an empty pool while the loop is making a spare: the ADD waits for that one instead of asking
  VPP for a pair of its own (VPP would make the two one after the other anyway);
- a failed ADD that took a spare leaves nothing (VPP's interface and the veth gone, in VPP's
  order); an interface name taken in the pod fails as before and leaves the pod's link alone;
- DEL answers with VPP's interface down and routeless and the pod's end back in the node's
  namespace, before any af_packet_delete; the pod's namespace can go then without taking the
  veth; the background delete removes VPP's interface, then the veth;
- an agent killed with spares and a retired pair: the next one never lists them as pods'
  objects, and deletes them all, in order;
- a VPP restart: the spares it forgot are deleted (no af_packet_delete for them), an ADD does
  not take one, and the pool is made again;
- `--teardown` removes spares too.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable

import pytest

from agent.dataplane import UndoStack
from agent.dataplane.vpp import VppDataplane, afpacket, names
from agent.dataplane.vpp.podpool import PodPool
from agent.linux import netlink
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
    assert not netlink.link_exists("vsws0")  # moved into the pod and renamed there
    assert "eth0" in links_in(pod_ns)
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
        # the pod's end is back in the node's namespace: the pod's namespace may go
        assert links_in(p.netns) == ["lo"] and netlink.link_exists("vsws0")
        assert pool.retiring() == {"vswp0"} and dp.owned() == {}
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)
    assert netlink.link_exists("vswp0")  # survived its pod's namespace
    pool.delete_retired()
    assert fake.requests.count("af_packet_delete") == 1
    assert not netlink.link_exists("vswp0") and not netlink.link_exists("vsws0")
    assert itf.sw_if_index not in fake.interfaces()
    assert fake.log() == []  # VPP's interface went while its device was still there
    assert pool.retiring() == set()


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
        assert sorted(links_in(ns)) == ["lo", "net1"] and dp.check(b, wb) == []
        dp.detach(b, wb)
    pool.delete_retired()
    assert fake.log() == [] and dp.owned() == {}

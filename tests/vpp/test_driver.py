"""The VPP driver against the fake VPP, with real veths and namespaces.

Plan:
- start(): base objects (VRFs, gateway loopback, drop route, host link both ways); idempotent.
- attach/detach, veth + AF_PACKET: VPP state (interface, tag, VRF, unnumbered, MTU, MAC, route,
  neighbor) and kernel state as expected; check() clean; detach leaves exactly the base state.
- attach/detach, TAP v2: the same, the TAP's Linux end in the pod namespace.
- TAP on a node without /dev/vhost-net (up front) and VPP's -11 (at create): a clear error.
- a VPP refusal at each attach step: DataplaneFailure naming the message; unwinding the undo
  stack leaves the fake and the kernel as before.
- VPP restart: ADD -> TryAgainLater, then the driver reconnects and re-applies its base config.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import pytest

from agent.dataplane.undo import UndoStack
from agent.dataplane.vpp import VppDataplane, ip, names
from agent.linux import iproute, netlink
from agent.model.errors import DataplaneFailure, TryAgainLater
from testbed.pods import vpp_pod as pod
from tests.fakevpp import FakeVPP

Factory = Callable[..., VppDataplane]


def test_start_creates_base_objects_once(fake: FakeVPP, driver_factory: Factory) -> None:
    dp = driver_factory()
    dp.start()
    assert (False, 1) in fake.tables()
    gw = fake.interface_by_tag(names.GATEWAY_TAG)
    assert gw is not None and gw.vrf[False] == 1 and gw.flags & 1
    assert [str(a) for a in gw.addresses] == ["10.1.1.1/32"]
    routes = fake.routes()
    assert routes[(1, "10.1.1.0/24")].paths[0]["type"] == 2  # drop
    assert routes[(0, "10.1.1.0/24")].paths[0]["table_id"] == 1  # main -> pod VRF
    assert routes[(1, "0.0.0.0/0")].paths[0]["table_id"] == 0  # pod VRF -> main
    host = fake.interface_by_tag(names.HOST_TAG)
    assert host is not None and host.name == "host-vpp2"
    assert [str(a) for a in host.addresses] == ["172.30.1.1/24"]
    with iproute.host_ns() as ipr:
        kroutes = ipr.route("get", dst="10.1.1.5")
        assert kroutes[0].get_attr("RTA_GATEWAY") == "172.30.1.1"
    before = fake.snapshot()
    dp.close()
    again = driver_factory()
    again.start()
    assert fake.snapshot() == before
    assert again.ready()


def test_veth_attach_check_detach(fake: FakeVPP, driver_factory: Factory, pod_ns: str) -> None:
    dp = driver_factory()
    dp.start()
    base = fake.snapshot()
    p = pod(pod_ns, "10.1.1.5/32")
    wiring = dp.attach(p, UndoStack())
    itf = fake.interface_by_tag(names.pod_tag(p.key))
    assert itf is not None
    assert itf.name == f"host-{wiring.host_ifname}" == "host-vswp0"  # the first free name
    assert (itf.vrf[False], itf.flags & 1, itf.mtu[0]) == (1, 1, 1450)
    assert itf.mac == wiring.gateway_mac and wiring.extra["sw_if_index"] == str(itf.sw_if_index)
    gw = fake.interface_by_tag(names.GATEWAY_TAG)
    assert gw is not None and itf.unnumbered_to == gw.sw_if_index
    route = fake.routes(1)[(1, "10.1.1.5/32")]
    assert route.paths[0]["sw_if_index"] == itf.sw_if_index
    assert fake.neighbors()[(itf.sw_if_index, "10.1.1.5")] == (wiring.pod_mac, 1)
    assert netlink.link_exists(wiring.host_ifname)
    with iproute.pod_ns(pod_ns) as ipr:
        link = ipr.link("get", ifname="eth0")[0]
        assert link.get_attr("IFLA_ADDRESS") == wiring.pod_mac
    assert dp.check(p, wiring) == []
    assert dp.owned() == {itf.name: names.pod_tag(p.key)}
    dp.detach(p, wiring)
    assert fake.snapshot() == base
    dp.veth.reaper.drain()  # the veth's delete, which the DEL left to the background
    assert not netlink.link_exists(wiring.host_ifname)
    dp.detach(p, wiring)  # repeated DEL: cheap success
    assert fake.snapshot() == base


def test_check_reports_a_missing_route(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp = driver_factory()
    dp.start()
    p = pod(pod_ns, "10.1.1.6/32")
    wiring = dp.attach(p, UndoStack())
    with fake.lock:
        del fake.state.routes[(False, 1, "10.1.1.6/32")]
    problems = dp.check(p, wiring)
    assert any("10.1.1.6/32" in x for x in problems), problems
    dp.detach(p, wiring)


def test_tap_attach_detach(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str, vhost_net: str
) -> None:
    dp = driver_factory(use_tap=True, vhost_net_path=vhost_net, tap_rx_ring_size=512)
    dp.start()
    assert fake.interface_by_tag(names.HOST_TAG) is not None
    base = fake.snapshot()
    p = pod(pod_ns, "10.1.1.7/32")
    wiring = dp.attach(p, UndoStack())
    itf = fake.interface_by_tag(names.pod_tag(p.key))
    assert itf is not None and itf.dev_type == "virtio" and itf.name == wiring.host_ifname
    assert itf.tap["rx"] == 512 and itf.tap["netns"] == pod_ns and itf.vrf[False] == 1
    assert "tap_create_v3" in fake.requests
    with iproute.pod_ns(pod_ns) as ipr:
        assert ipr.link("get", ifname="eth0")[0].get_attr("IFLA_ADDRESS") == wiring.pod_mac
    assert dp.check(p, wiring) == []
    dp.detach(p, wiring)
    assert fake.snapshot() == base
    with iproute.Session.pod(pod_ns) as links:
        assert links.ifindex("eth0") is None


def test_tap_without_vhost_net_is_refused_up_front(
    fake: FakeVPP, driver_factory: Factory, workdir: str
) -> None:
    dp = driver_factory(use_tap=True, vhost_net_path=f"{workdir}/no-vhost-net")
    with pytest.raises(DataplaneFailure) as err:
        dp.start()
    assert "modprobe vhost_net" in str(err.value) and "UseTAPInterfaces" in str(err.value)


def test_tap_retval_minus_11_explains(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str, vhost_net: str
) -> None:
    dp = driver_factory(use_tap=True, vhost_net_path=vhost_net)
    dp.start()
    base = fake.snapshot()
    fake.set_tap_works(False)  # what VPP answers on a kernel without vhost_net
    undo = UndoStack()
    with pytest.raises(DataplaneFailure) as err:
        dp.attach(pod(pod_ns, "10.1.1.8/32"), undo)
    assert err.value.code == 101
    assert "-11" in str(err.value) and "vhost_net" in str(err.value)
    assert undo.unwind() == []
    assert fake.snapshot() == base


ATTACH_STEPS = [
    "af_packet_create_v3",
    "sw_interface_tag_add_del",
    "sw_interface_set_table",
    "sw_interface_set_unnumbered",
    "sw_interface_set_mtu",
    "sw_interface_set_flags",
    "ip_neighbor_add_del",
    "ip_route_add_del",
]


@pytest.mark.parametrize("message", ATTACH_STEPS)
def test_refusal_at_each_step_leaves_nothing(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str, message: str
) -> None:
    dp = driver_factory()
    dp.start()
    base = fake.snapshot()
    p = pod(pod_ns, "10.1.1.9/32")
    fake.fail_once(message, -3)
    undo = UndoStack()
    with pytest.raises(DataplaneFailure) as err:
        dp.attach(p, undo)
    assert message in str(err.value) and "retval -3" in str(err.value)
    assert undo.unwind() == []
    assert fake.snapshot() == base
    assert dp.links.ours() == {}  # no veth left either
    # The same pod wires fine afterwards.
    wiring = dp.attach(p, UndoStack())
    dp.detach(p, wiring)
    assert fake.snapshot() == base


def test_vpp_restart_try_again_then_reconnect(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str, pod_ns2: str
) -> None:
    dp = driver_factory()
    dp.start()
    fake.restart()
    p = pod(pod_ns, "10.1.1.10/32")
    undo = UndoStack()
    with pytest.raises(TryAgainLater):
        dp.attach(p, undo)
    undo.unwind()
    wiring = dp.attach(p, UndoStack())  # reconnects, base config again, then wires
    assert fake.interface_by_tag(names.GATEWAY_TAG) is not None
    assert (1, "10.1.1.0/24") in fake.routes(1)
    assert dp.check(p, wiring) == []
    dp.detach(p, wiring)


def test_vpp_down_is_try_again_later(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp = driver_factory()
    dp.start()
    fake.stop()
    p = pod(pod_ns, "10.1.1.11/32")
    with pytest.raises(TryAgainLater) as err:
        dp.attach(p, UndoStack())
    assert err.value.code == 11
    assert not dp.ready()
    with pytest.raises(TryAgainLater):
        dp.detach(p, None)
    fake.start()
    assert dp.ready()


def test_two_pods_and_leftover_cleanup(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str, pod_ns2: str
) -> None:
    dp = driver_factory()
    dp.start()
    base = fake.snapshot()
    a, b = pod(pod_ns, "10.1.1.12/32"), pod(pod_ns2, "10.1.1.13/32")
    wa = dp.attach(a, UndoStack())
    dp.attach(b, UndoStack())
    # A repeated ADD of b (e.g. after an agent crash) replaces its leftovers.
    with iproute.pod_ns(pod_ns2) as ipr:
        ipr.link("del", ifname="eth0")
    wb = dp.attach(b, UndoStack())
    assert len(dp.owned()) == 2
    dp.detach(a, wa)
    dp.detach(b, wb)
    assert fake.snapshot() == base


def test_ipv6_pod(fake: FakeVPP, driver_factory: Factory, pod_ns: str) -> None:
    gws = (ipaddress.ip_interface("10.1.1.1/24"), ipaddress.ip_interface("fd00:1:1::1/64"))
    dp = driver_factory(pod_gateways=gws)
    dp.start()
    base = fake.snapshot()
    p = pod(pod_ns, "fd00:1:1::5/128")
    wiring = dp.attach(p, UndoStack())
    assert (1, "fd00:1:1::5/128") in fake.routes(1)
    assert dp.check(p, wiring) == []
    dp.detach(p, wiring)
    assert fake.snapshot() == base


WHOLE_TABLE_DUMPS = {"sw_interface_dump", "af_packet_dump", "ip_route_dump", "tap_v2_dump"}


def test_pod_add_check_del_walk_no_whole_table(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str, pod_ns2: str
) -> None:
    """ADD, CHECK and DEL of a pod ask VPP about that pod only (filtered by name, one route
    lookup per address): their cost must not grow with the pods already on the node."""
    dp = driver_factory()
    dp.start()
    first = pod(pod_ns, "10.1.1.20/32")
    dp.attach(first, UndoStack())  # another pod already on the node
    second = pod(pod_ns2, "10.1.1.21/32")
    mark = len(fake.requests)
    wiring = dp.attach(second, UndoStack())
    assert dp.check(second, wiring) == []
    dp.detach(second, wiring)
    sent = fake.requests[mark:]
    assert "ip_route_lookup" in sent and "af_packet_create_v3" in sent, sent
    assert f"sw_interface_dump[name=host-{wiring.host_ifname}]" in sent, sent
    assert not WHOLE_TABLE_DUMPS & set(sent), sent
    assert fake.interface_by_tag(names.pod_tag(second.key)) is None
    assert fake.interface_by_tag(names.pod_tag(first.key)) is not None


def test_a_veth_add_tags_its_interface_first_of_all_it_asks_after_the_create(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    """The tag is the first thing an ADD asks of VPP after the create (it leads the ADD's
    pipeline now): a half-wired interface is its owner's from VPP's first step on."""
    dp = driver_factory()
    dp.start()
    p = pod(pod_ns, "10.1.1.22/32")
    mark = len(fake.requests)
    dp.attach(p, UndoStack())
    sent = fake.requests[mark:]
    create = sent.index("af_packet_create_v3")
    assert sent[create + 1] == "sw_interface_tag_add_del", sent
    assert sent.count("sw_interface_tag_add_del") == 1, sent
    itf = fake.interface_by_tag(names.pod_tag(p.key))
    assert itf is not None and itf.flags & 1


def test_a_del_leaves_the_route_to_its_address_another_pod_holds_now(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str, pod_ns2: str
) -> None:
    dp = driver_factory()
    dp.start()
    a, b = pod(pod_ns, "10.1.1.23/32"), pod(pod_ns2, "10.1.1.24/32")
    wa, wb = dp.attach(a, UndoStack()), dp.attach(b, UndoStack())
    host, sw_b = ipaddress.ip_network("10.1.1.23/32"), int(wb.extra["sw_if_index"])
    ip.delete_route(dp.api, 1, host)
    ip.add_route(dp.api, 1, host, ip.via_interface(host, sw_b))  # a's address leads to b now
    dp.detach(a, wa)
    assert fake.routes(1)[(1, "10.1.1.23/32")].paths[0]["sw_if_index"] == sw_b
    assert fake.interface_by_tag(names.pod_tag(a.key)) is None
    assert not any(ip_ == "10.1.1.23" for _, ip_ in fake.neighbors())
    assert dp.check(b, wb) == []

"""InterfaceRxMode: the receive mode of the interfaces the VPP driver creates.

Plan (fake VPP, which loads VPP 26.06's message definitions):
- the config key takes polling, interrupt or adaptive (or nothing: VPP's default-rx-mode) and
  refuses anything else, naming the key;
- with a mode set, a pod's AF_PACKET interface and the VPP-host interconnect get it, and so do
  the pod pool's spares before an ADD takes one; without one, the driver sends no such request;
- VPP refusing the mode fails the ADD and leaves no trace: no VPP interface, no host link.
Against a real VPP (tests/vpp/test_real_vpp.py's environment), VPP's own rx placement reports the
mode of a pod's queue (`sw_interface_rx_placement_dump`).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Callable

import pytest

from agent.app.config import parse
from agent.dataplane.undo import UndoStack
from agent.dataplane.vpp import VppConfig, VppDataplane, afpacket
from agent.linux import netlink, pod_netns
from agent.model.errors import InvalidConfig
from testbed.netns import named_netns
from testbed.pods import vpp_pod as pod
from testbed.traffic import Server, tcp_transfer, udp_exchange
from tests.fakevpp import FakeVPP

Factory = Callable[..., VppDataplane]


def test_the_key_takes_the_three_modes_and_nothing_else() -> None:
    for mode in ("polling", "interrupt", "adaptive", ""):
        assert parse({"InterfaceRxMode": mode}).interface_rx_mode == mode
        assert afpacket.RingOptions(rx_mode=mode).rx_mode == mode
    with pytest.raises(Exception, match="InterfaceRxMode"):
        parse({"InterfaceRxMode": "busy"})
    with pytest.raises(InvalidConfig, match="InterfaceRxMode=busy"):
        afpacket.RingOptions(rx_mode="busy")


def test_a_pod_and_the_interconnect_get_the_mode(
        fake: FakeVPP, driver_factory: Factory, pod_ns: str) -> None:
    dp = driver_factory(afpacket=afpacket.RingOptions(rx_mode="polling"))
    dp.start()
    p = pod(pod_ns, "10.1.1.50/32")
    wiring = dp.attach(p, UndoStack())
    modes = {i.host_if_name: i.rx_mode for i in fake.interfaces().values() if i.host_if_name}
    assert modes == {wiring.host_ifname: 1, "vpp2": 1}, modes
    dp.detach(p, wiring)


def test_the_pools_spares_get_the_mode_before_a_pod_takes_one(
        fake: FakeVPP, driver_factory: Factory, pod_ns: str) -> None:
    dp = driver_factory(pod_pool=1, afpacket=afpacket.RingOptions(rx_mode="adaptive"))
    assert dp.pool is not None
    dp.pool.start(loop=False)
    dp.start()
    dp.pool.refill()
    (spare,) = dp.pool.hosts()
    assert {i.host_if_name: i.rx_mode for i in fake.interfaces().values()}[spare] == 3
    p = pod(pod_ns, "10.1.1.50/32")
    wiring = dp.attach(p, UndoStack())
    assert wiring.host_ifname == spare
    dp.detach(p, wiring)


def test_without_the_key_the_driver_asks_nothing(
        fake: FakeVPP, driver_factory: Factory, pod_ns: str) -> None:
    dp = driver_factory()
    dp.start()
    p = pod(pod_ns, "10.1.1.50/32")
    wiring = dp.attach(p, UndoStack())
    assert all(i.rx_mode == 2 for i in fake.interfaces().values())  # the fake's default
    assert "sw_interface_set_rx_mode" not in fake.requests
    dp.detach(p, wiring)


def test_a_refused_mode_fails_the_add_and_leaves_nothing(
        fake: FakeVPP, driver_factory: Factory, pod_ns: str) -> None:
    dp = driver_factory(afpacket=afpacket.RingOptions(rx_mode="adaptive"))
    dp.start()
    before = set(fake.interfaces())
    fake.fail_once("sw_interface_set_rx_mode", -1)
    undo = UndoStack()
    with pytest.raises(Exception, match="InterfaceRxMode adaptive"):
        dp.attach(pod(pod_ns, "10.1.1.50/32"), undo)
    undo.unwind()
    assert set(fake.interfaces()) == before
    assert dp.owned() == {} and not netlink.link_exists("vswp0")


REAL = os.environ.get("VSWITCH_TEST_VPP_SOCKET", "")
V4 = ipaddress.ip_network("10.252.1.0/24")


@pytest.mark.vpp
@pytest.mark.skipif(not REAL, reason="VSWITCH_TEST_VPP_SOCKET is not set (no real VPP)")
def test_a_real_vpp_polls_the_pods_queues_and_carries_their_traffic() -> None:
    suffix = secrets.token_hex(2)
    dp = VppDataplane(VppConfig(
        api_socket=REAL, pod_vrf_id=1, pod_gateways=(ipaddress.ip_interface(f"{V4[1]}/24"),),
        vpp_host_ip=ipaddress.ip_interface("172.31.252.1/24"),
        host_linux_ip=ipaddress.ip_interface("172.31.252.2/24"),
        host_ifname=f"vswr{suffix}h", host_vpp_ifname=f"vswr{suffix}v",
        afpacket=afpacket.RingOptions(rx_mode="polling")))
    try:
        dp.start()
        with named_netns("tvx") as ns_a, named_netns("tvx") as ns_b:
            a, b = pod(ns_a, f"{V4[21]}/32"), pod(ns_b, f"{V4[22]}/32")
            wa, wb = dp.attach(a, UndoStack()), dp.attach(b, UndoStack())
            try:
                pod_netns.configure(a, wa.gateway_mac)
                pod_netns.configure(b, wb.gateway_mac)
                for wiring in (wa, wb):
                    index = int(wiring.extra["sw_if_index"])
                    placed = dp.api.dump("sw_interface_rx_placement_dump", sw_if_index=index)
                    assert placed and all(int(q.mode) == 1 for q in placed), placed
                with Server(ns_b, "tcp", str(V4[22]), 5001), \
                        Server(ns_b, "udp", str(V4[22]), 5002):
                    tcp = tcp_transfer(ns_a, str(V4[22]), 5001)
                    assert tcp.ok, tcp.detail
                    udp = udp_exchange(ns_a, str(V4[22]), 5002)
                    assert udp.ok, udp.detail
            finally:
                dp.detach(a, wa)
                dp.detach(b, wb)
    finally:
        dp.teardown()
        dp.close()

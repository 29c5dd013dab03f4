"""The driver against a real VPP: skipped unless VSWITCH_TEST_VPP_SOCKET names its API socket.

Plan (both wiring modes): two pods wired, configured with agent.podside, ping each other and the
node (the host end of the interconnect) through VPP; DEL of both leaves no pod interface, route or
neighbor in VPP. On a node without /dev/vhost-net, TAP mode is proven up to VPP accepting the
request: VPP answers -11 and the error tells the operator what to change. VPP runs in the machine's
namespace, so these tests use it (with a test-only pod subnet and interconnect names).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent import podside
from agent.dataplane import UndoStack
from agent.dataplane.vpp import (
    VppConfig,
    VppDataplane,
    afpacket,
    hostlink,
    interfaces,
    ip,
    names,
    neighbors,
    tap,
)
from agent.errors import DataplaneFailure
from tests.helpers.netns import named_netns, ping
from tests.vpp.conftest import pod

SOCKET = os.environ.get("VSWITCH_TEST_VPP_SOCKET", "")
pytestmark = [
    pytest.mark.vpp,
    pytest.mark.skipif(not SOCKET, reason="VSWITCH_TEST_VPP_SOCKET is not set (no real VPP)"),
]


@pytest.fixture(params=[False, True], ids=["veth-afpacket", "tapv2"])
def driver(request: pytest.FixtureRequest) -> Iterator[VppDataplane]:
    use_tap = bool(request.param)
    if use_tap and not os.path.exists("/dev/vhost-net"):
        pytest.skip("no /dev/vhost-net on this node: VPP cannot create TAPs")
    suffix = secrets.token_hex(2)
    dp = VppDataplane(VppConfig(
        api_socket=SOCKET, use_tap=use_tap, pod_vrf_id=1,
        pod_gateways=(ipaddress.ip_interface("10.251.1.1/24"),),
        vpp_host_ip=ipaddress.ip_interface("172.31.251.1/24"),
        host_linux_ip=ipaddress.ip_interface("172.31.251.2/24"),
        host_ifname=f"vswt{suffix}h", host_vpp_ifname=f"vswt{suffix}v",
    ))
    try:
        dp.start()
        yield dp
    finally:
        # The test's interconnect goes again (VPP's end first, then the Linux end).
        for itf in interfaces.by_tag(dp.api, names.HOST_TAG):
            if use_tap:
                tap.delete(dp.api, itf.sw_if_index)
            else:
                afpacket.delete(dp.api, dp.cfg.host_vpp_ifname)
        hostlink.remove(dp.cfg.host_ifname)
        dp.close()


def test_two_pods_ping_and_del_leaves_nothing(driver: VppDataplane) -> None:
    with named_netns("tvr") as ns_a, named_netns("tvr") as ns_b:
        a, b = pod(ns_a, "10.251.1.21/32"), pod(ns_b, "10.251.1.22/32")
        wa = driver.attach(a, UndoStack())
        wb = driver.attach(b, UndoStack())
        try:
            podside.configure(a, wa.gateway_mac)
            podside.configure(b, wb.gateway_mac)
            assert ping(ns_a, "10.251.1.22")
            assert ping(ns_b, "10.251.1.21")
            assert ping(ns_a, "172.31.251.2")  # the node, through the interconnect
        finally:
            driver.detach(a, wa)
            driver.detach(b, wb)
        api = driver.api
        tags = {i.tag for i in interfaces.dump(api)}
        assert names.pod_tag(a.key) not in tags and names.pod_tag(b.key) not in tags
        routes = ip.routes(api, 1, False)
        assert ipaddress.ip_network("10.251.1.21/32") not in routes
        assert ipaddress.ip_network("10.251.1.22/32") not in routes
        assert not any(nip in ("10.251.1.21", "10.251.1.22") for _, nip in neighbors.dump(api))


def test_tap_on_a_node_without_vhost_net_is_refused_by_vpp_with_a_plain_hint(
    tmp_path: Path,
) -> None:
    """Where /dev/vhost-net is missing (these machines' kernels), TAP is proven up to VPP
    accepting the request: VPP itself answers -11 and the operator reads what to change."""
    if os.path.exists("/dev/vhost-net"):
        pytest.skip("this node has /dev/vhost-net: TAP mode is tested for real above")
    stand_in = tmp_path / "vhost-net"
    stand_in.write_text("")  # gets the driver past its own check, so that VPP decides
    suffix = secrets.token_hex(2)
    dp = VppDataplane(VppConfig(
        api_socket=SOCKET, use_tap=True, pod_vrf_id=1, vhost_net_path=str(stand_in),
        pod_gateways=(ipaddress.ip_interface("10.251.1.1/24"),),
        vpp_host_ip=None, host_linux_ip=None,
        host_ifname=f"vswt{suffix}h", host_vpp_ifname=f"vswt{suffix}v",
    ))
    try:
        dp.start()
        with named_netns("tvr") as ns:
            p = pod(ns, "10.251.1.31/32")
            undo = UndoStack()
            with pytest.raises(DataplaneFailure) as info:
                dp.attach(p, undo)
            undo.unwind()
            assert "retval -11" in str(info.value.details)
            assert "/dev/vhost-net" in str(info.value.details)
            assert "UseTAPInterfaces: false" in str(info.value.details)
            assert names.pod_tag(p.key) not in {i.tag for i in interfaces.dump(dp.api)}
    finally:
        dp.close()

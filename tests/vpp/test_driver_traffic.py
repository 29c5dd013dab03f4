"""What the VPP driver sets up so that real traffic (TCP, UDP, pod to node) works, against the fake
VPP with real veths and namespaces.

Plan:
- every AF_PACKET interface (pods and the VPP-host interconnect) asks VPP for checksum/GSO offload
  (without it TCP and UDP leave VPP with bad checksums), TPACKET_V2, qdisc bypass and the
  configured ring: the pods' rings, and the interconnect's own (AfPacketHost*Frames: one per
  node, larger by default); a ring the kernel would refuse is refused at config time, naming
  the pods' or the interconnect's key;
- the main VRF routes everything else to the node's end of the interconnect, IPv4 via its address
  and IPv6 via its link-local address (both ends have fixed MACs, so fixed link-locals), with
  static neighbors; Linux routes the pod IPv6 subnet via VPP's link-local;
- Linux holds VPP's end as a permanent neighbor too (its IPv4 address, and its link-local when
  pods use IPv6), in both interconnect modes: Linux must never ARP for it, since it would ask
  with the reply's source (e.g. the node's main address), which VPP drops as not on the
  connected subnet; set again by every start (an agent restart), gone with teardown;
- a VPP without the tap plugin serves veth pods; a TAP config on it is refused naming the plugin;
- switching the interconnect from veth to TAP removes the old veth pair (its name is the TAP's).
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from agent.dataplane.undo import UndoStack
from agent.dataplane.vpp import VppConfig, VppDataplane, afpacket, base, names
from agent.linux import iproute, netlink
from agent.model.errors import DataplaneFailure, InvalidConfig
from testbed.pods import vpp_pod as pod
from tests.fakevpp import FakeVPP

Factory = Callable[..., VppDataplane]
DUAL = (ipaddress.ip_interface("10.1.1.1/24"), ipaddress.ip_interface("fd00:1:1::1/64"))


def test_every_afpacket_interface_completes_checksums(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    rings = afpacket.RingOptions(rx_frames=16, tx_frames=8)
    dp = driver_factory(afpacket=rings, host_rx_frames=32, host_tx_frames=48)
    dp.start()
    p = pod(pod_ns, "10.1.1.5/32")
    dp.attach(p, UndoStack())
    host = fake.interface_by_tag(names.HOST_TAG)
    itf = fake.interface_by_tag(names.pod_tag(p.key))
    assert host is not None and itf is not None
    for sent, frames in ((host.afpacket, (32, 48)), (itf.afpacket, (16, 8))):
        assert sent["flags"] & afpacket.FLAG_CKSUM_GSO
        assert sent["flags"] & afpacket.FLAG_VERSION_2
        assert sent["flags"] & afpacket.FLAG_QDISC_BYPASS
        assert (sent["rx_frames_per_block"], sent["tx_frames_per_block"]) == frames
        assert sent["rx_frame_size"] == sent["tx_frame_size"] == afpacket.GSO_FRAME
    assert rings.kernel_bytes == 24 * afpacket.GSO_FRAME


def test_the_interconnect_rings_default_larger_than_a_pods() -> None:
    cfg = VppConfig(pod_gateways=DUAL[:1])
    assert (cfg.host_afpacket.rx_frames, cfg.host_afpacket.tx_frames) == (16, 64)
    assert cfg.host_afpacket.kernel_bytes == 80 * afpacket.GSO_FRAME  # 5.2 MiB per node
    # a transmit ring takes a whole batch of each receive ring that feeds it (VPP drops the
    # rest of a batch as `tx ring overrun`): pod -> pod, pod -> interconnect, back to a pod
    assert cfg.afpacket.tx_frames >= max(cfg.afpacket.rx_frames, cfg.host_afpacket.rx_frames)
    assert cfg.host_afpacket.tx_frames >= cfg.afpacket.rx_frames
    assert cfg.afpacket.kernel_bytes <= 2 * 2**20  # issue #13: at most 2 MiB per pod


def test_ring_options_follow_the_config(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp = driver_factory(afpacket=afpacket.RingOptions(version=3, qdisc_bypass=False))
    dp.start()
    p = pod(pod_ns, "10.1.1.6/32")
    dp.attach(p, UndoStack())
    itf = fake.interface_by_tag(names.pod_tag(p.key))
    assert itf is not None
    assert itf.afpacket["flags"] == afpacket.FLAG_CKSUM_GSO


@pytest.mark.parametrize("kw", [
    {"version": 1}, {"frame_size": 2050}, {"frame_size": 1024}, {"rx_frames": 1},
    {"frame_size": 2048 * 33, "rx_frames": 3},  # 3 x 67584 bytes is not page-aligned
])
def test_rings_the_kernel_refuses_are_refused_up_front(kw: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfig):
        afpacket.RingOptions(**kw)


def test_a_refused_ring_names_its_key() -> None:
    with pytest.raises(InvalidConfig, match="AfPacketTxFrames=3"):
        afpacket.RingOptions(tx_frames=3)
    with pytest.raises(InvalidConfig, match="AfPacketHostRxFrames=5"):
        VppConfig(pod_gateways=DUAL[:1], host_rx_frames=5)


def test_main_vrf_routes_the_rest_to_the_host(fake: FakeVPP, driver_factory: Factory) -> None:
    dp = driver_factory(pod_gateways=DUAL)
    dp.start()
    host = fake.interface_by_tag(names.HOST_TAG)
    assert host is not None
    routes = fake.routes(0)
    v4 = routes[(0, "0.0.0.0/0")].paths[0]
    assert (v4["sw_if_index"], str(v4["nh"]["address"]["ip4"])) == (host.sw_if_index, "172.30.1.2")
    v6 = routes[(0, "::/0")].paths[0]
    assert v6["sw_if_index"] == host.sw_if_index
    assert str(v6["nh"]["address"]["ip6"]) == str(base.HOST_LINUX_LL)
    assert host.ip6_enabled and host.link_local == str(base.VPP_HOST_LL)
    neigh = fake.neighbors()
    assert neigh[(host.sw_if_index, "172.30.1.2")][0] == base.HOST_LINUX_MAC
    assert neigh[(host.sw_if_index, str(base.HOST_LINUX_LL))][0] == base.HOST_LINUX_MAC
    # Pods' other traffic leaves the pod VRF for the main one (and so for the host).
    assert fake.routes(1)[(1, "::/0")].paths[0]["table_id"] == 0
    with iproute.host_ns() as ipr:
        got = ipr.route("get", dst="fd00:1:1::5")[0]
        assert got.get_attr("RTA_GATEWAY") == str(base.VPP_HOST_LL)
        # The Linux end really has the link-local address VPP's neighbor entry names.
        lls = {a.get_attr("IFA_ADDRESS") for a in ipr.get_addr(family=10, label=None)}
    assert str(base.HOST_LINUX_LL) in lls
    before = fake.snapshot()
    driver_factory(pod_gateways=DUAL).start()
    assert fake.snapshot() == before


def linux_neighbors(node_ns: str, ifname: str = "vpp1") -> dict[str, tuple[str, list[str]]]:
    """`ip neigh show dev IFNAME` in the node namespace: {address: (MAC, states)}."""
    out = subprocess.run(["nsenter", f"--net={node_ns}", "ip", "-j", "neigh", "show", "dev",
                          ifname], capture_output=True, text=True, check=True)
    return {n["dst"]: (n.get("lladdr", ""), n.get("state", [])) for n in json.loads(out.stdout)}


@pytest.mark.parametrize("use_tap", [False, True], ids=["veth-afpacket", "tapv2"])
def test_linux_holds_vpps_end_as_a_permanent_neighbor(
    fake: FakeVPP, driver_factory: Factory, node_ns: str, vhost_net: str, use_tap: bool
) -> None:
    def start() -> VppDataplane:
        dp = driver_factory(pod_gateways=DUAL, use_tap=use_tap, vhost_net_path=vhost_net)
        dp.start()
        return dp

    start()
    vpp_ends = {"172.30.1.1": base.HOST_VPP_MAC, str(base.VPP_HOST_LL): base.HOST_VPP_MAC}
    for address, mac in vpp_ends.items():
        assert linux_neighbors(node_ns).get(address) == (mac, ["PERMANENT"]), address
    # An agent restart puts back what was lost or changed meanwhile.
    with iproute.host_ns() as ipr:
        index = ipr.link_lookup(ifname="vpp1")[0]
        ipr.neigh("del", dst="172.30.1.1", ifindex=index)
        ipr.neigh("replace", dst=str(base.VPP_HOST_LL), lladdr="02:00:00:00:00:99",
                  ifindex=index, state=0x04)  # NUD_STALE, a wrong MAC
    dp = start()
    for address, mac in vpp_ends.items():
        assert linux_neighbors(node_ns).get(address) == (mac, ["PERMANENT"]), address
    dp.teardown()
    out = subprocess.run(["nsenter", f"--net={node_ns}", "ip", "neigh", "show"],
                         capture_output=True, text=True, check=True).stdout
    assert not any(address in out for address in vpp_ends), out


def test_vpp_without_the_tap_plugin_serves_veth_pods(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str, vhost_net: str
) -> None:
    fake.without_plugin("tapv2")
    dp = driver_factory()
    dp.start()
    p = pod(pod_ns, "10.1.1.7/32")
    wiring = dp.attach(p, UndoStack())
    assert dp.check(p, wiring) == []
    dp.detach(p, wiring)
    assert dp.owned() == {}
    tap = driver_factory(use_tap=True, vhost_net_path=vhost_net)
    with pytest.raises(DataplaneFailure, match="tap"):
        tap.start()


def test_switching_the_interconnect_to_tap_removes_the_veth_pair(
    fake: FakeVPP, driver_factory: Factory, vhost_net: str
) -> None:
    driver_factory().start()
    assert netlink.link_exists("vpp1") and netlink.link_exists("vpp2")
    tap = driver_factory(use_tap=True, vhost_net_path=vhost_net)
    tap.start()
    host = fake.interface_by_tag(names.HOST_TAG)
    assert host is not None and host.dev_type == "virtio"
    assert not netlink.link_exists("vpp2")
    assert fake.interface_by_tag(names.HOST_TAG) is not None
    assert len([i for i in fake.state.interfaces.values() if i.dev_type == afpacket.DEV_TYPE]) == 0


@pytest.mark.parametrize("gateways", [DUAL[:1], DUAL], ids=["ipv4", "dual-stack"])
def test_teardown_leaves_vpp_and_the_node_as_before(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str, gateways: tuple[object, ...]
) -> None:
    empty = fake.snapshot()
    dp = driver_factory(pod_gateways=gateways)
    dp.start()
    p = pod(pod_ns, "10.1.1.8/32")
    wiring = dp.attach(p, UndoStack())
    dp.detach(p, wiring)
    removed = dp.teardown()
    assert any("interconnect" in r for r in removed) and any("loopback" in r for r in removed)
    after = fake.snapshot()
    # Only the (empty) VRF tables stay: VPP mis-forwards a pod VRF deleted and made again.
    assert {**after, "tables": empty["tables"]} == empty
    assert {t for _, t in after["tables"]} == {0, 1}
    assert not netlink.link_exists("vpp1") and not netlink.link_exists("vpp2")
    assert dp.teardown() == []  # nothing left to remove


def test_start_after_teardown_builds_the_same_base(
    fake: FakeVPP, driver_factory: Factory
) -> None:
    def shape() -> tuple[object, ...]:
        """The base's objects without their (never reused) sw_if_indexes."""
        snap = fake.snapshot()
        return (snap["tables"], [i[:3] + i[4:5] + i[6:] for i in snap["interfaces"]],
                [key for key, _ in snap["routes"]], sorted(ip for (_, ip), _ in
                                                           snap["neighbors"]))

    dp = driver_factory()
    dp.start()
    built = shape()
    dp.teardown()
    driver_factory().start()
    assert shape() == built


def test_the_cluster_pod_ranges_go_into_vpp_and_die_there(
    fake: FakeVPP, driver_factory: Factory
) -> None:
    """Pods of other nodes: the node routes the whole cluster range into VPP (a Service DNATed
    to a remote pod must enter VPP, where the mesh carries it); without a more specific route
    VPP drops it instead of sending it back to the node (a loop)."""
    nets = (ipaddress.ip_network("10.1.0.0/16"), ipaddress.ip_network("fd00:1::/48"))
    gws = (DUAL[0], ipaddress.ip_interface("fd00:1:0:1::1/64"))
    dp = driver_factory(pod_gateways=gws, cluster_pod_nets=nets)
    dp.start()
    for table in (0, 1):
        for net in nets:
            assert fake.routes(table)[(table, str(net))].paths[0]["type"] == 2  # drop
    assert fake.routes(0)[(0, "10.1.1.0/24")].paths[0]["table_id"] == 1  # ours: more specific
    with iproute.host_ns() as ipr:
        assert ipr.route("get", dst="10.1.7.9")[0].get_attr("RTA_GATEWAY") == "172.30.1.1"
        got = ipr.route("get", dst="fd00:1:0:7::9")[0].get_attr("RTA_GATEWAY")
    assert got == str(base.VPP_HOST_LL)
    dp.teardown()
    assert not {k[1] for k in fake.routes()} & {"10.1.0.0/16", "fd00:1::/48"}

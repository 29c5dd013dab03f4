"""The VPP node mesh (agent/dataplane/vpp/mesh.py) against the fake VPP (VPP 26.06's messages).

Test plan: programming two remote nodes makes Contiv's objects (BVI in the pod VRF with the
VXLAN address and the node's MAC, a bridge domain without learning or flooding with the BVI in
split-horizon group 1, GSO on the BVI, a tunnel per node in the main VRF in SHG 1, static
neighbors, static L2 FIB entries, pod-VRF routes to the pod and VPP-host subnets); the tunnels
run between the nodes' VPP-host interconnect addresses (host 1 of each vppHostSubnet), not
their node IPs; programming again duplicates nothing; a changed VPP-host subnet re-creates
only that tunnel; unprogram removes one node's objects and nothing else; prune after a
"restart" (a new VppMesh on the same VPP) removes what no remote node explains; a VPP restart
changes the generation and programming rebuilds it all; with IPv4-only pods (the driver made the
pod VRF in IPv4 only) the mesh makes the IPv6 pod table its IPv6 next hops need; a BVI whose
making failed half-way is completed by the next try, not used as it is; `on_interface` (cnat,
when VPP translates Services) is told the BVI once per VPP connection.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from agent.dataplane.vpp import ip
from agent.dataplane.vpp.api import VppApi, VppCallFailed
from agent.dataplane.vpp.mesh import BVI_TAG, VppMesh
from agent.model.node import NodeInfo, local_node
from ipam import IPAMConfig, node_networks
from tests.fakevpp import API_DIR, FakeVPP

CFG = IPAMConfig.from_mapping({"PodSubnetV6CIDR": "fd00:10::/48"})[0]
POD_VRF, BD = 1, 10


def node(node_id: int) -> NodeInfo:
    return local_node(f"n{node_id}", f"192.168.16.{node_id}", node_networks(CFG, node_id))


@pytest.fixture
def api(bare_fake: FakeVPP) -> Iterator[VppApi]:
    client = VppApi(bare_fake.socket_path, API_DIR, 2.0, 3.0, "test")
    for ipv6 in (False, True):
        ip.add_table(client, POD_VRF, ipv6, "pods")
    yield client
    client.close()


def mesh(api: VppApi) -> VppMesh:
    return VppMesh(api, POD_VRF, 0, ipaddress.ip_network("192.168.30.0/24"), bd_id=BD)


def summary(bare_fake: FakeVPP) -> dict[str, list[Any]]:
    s = bare_fake.state
    bd = s.bridge_domains[BD]
    return {
        "tunnels": sorted((t.src, t.dst, t.vni, t.encap_vrf_id) for t in s.tunnels.values()),
        "members": sorted(bd.members.values()),
        "fib": sorted((mac, static) for mac, (_, static) in bd.fib.items()
                      if mac not in bd.bvi_macs),
        "neighbors": sorted((ip_, mac) for (_, ip_), (mac, _) in s.neighbors.items()),
        "routes": sorted((str(r.prefix), str(r.paths[0]["nh"])) for r in s.routes.values()
                         if r.table_id == POD_VRF),
    }


def test_program_makes_contivs_mesh_once(bare_fake: FakeVPP, api: VppApi) -> None:
    local, two, three = node(1), node(2), node(3)
    m = mesh(api)
    for _ in range(2):  # the second round must change nothing
        m.program(local, two)
        m.program(local, three)
    s = bare_fake.state
    bvi = next(i for i in s.interfaces.values() if i.tag == BVI_TAG)
    assert bvi.mac == "12:2b:00:00:00:01" and bvi.vrf == {False: POD_VRF, True: POD_VRF}
    assert [str(a) for a in bvi.addresses] == ["192.168.30.1/24"] and bvi.ip6_enabled
    bd = s.bridge_domains[BD]
    assert not (bd.flags["learn"] or bd.flags["flood"] or bd.flags["uu_flood"])
    assert bd.members[bvi.sw_if_index] == (1, 1)  # BVI port, split-horizon group 1
    got = summary(bare_fake)
    assert got["tunnels"] == [("172.30.1.1", "172.30.2.1", 10, 0),
                              ("172.30.1.1", "172.30.3.1", 10, 0)]
    assert got["members"] == [(0, 1), (0, 1), (1, 1)]
    assert bvi.gso and not any(s.interfaces[t].gso for t in s.tunnels)  # segmented at the BVI
    assert got["fib"] == [("12:2b:00:00:00:02", True), ("12:2b:00:00:00:03", True)]
    assert ("192.168.30.2", "12:2b:00:00:00:02") in got["neighbors"]
    assert ("fe80::2b:0:3", "12:2b:00:00:00:03") in got["neighbors"]
    assert len(got["neighbors"]) == 4
    routes = dict(got["routes"])
    assert set(routes) == {"10.1.2.0/24", "10.1.3.0/24", "fd00:10:0:2::/64",
                           "fd00:10:0:3::/64", "172.30.2.0/24", "172.30.3.0/24"}
    assert "192.168.30.2" in routes["10.1.2.0/24"] and "fe80::2b:0:3" in routes["fd00:10:0:3::/64"]


def test_changed_vpp_host_subnet_unprogram_and_prune(bare_fake: FakeVPP, api: VppApi) -> None:
    local, two, three = node(1), node(2), node(3)
    m = mesh(api)
    m.program(local, two)
    m.program(local, three)
    m.program(local, replace(two, node_ip="192.168.16.22"))  # the tunnel does not name it
    assert summary(bare_fake)["tunnels"] == [("172.30.1.1", "172.30.2.1", 10, 0),
                                        ("172.30.1.1", "172.30.3.1", 10, 0)]
    moved = replace(two, vpp_host_subnet="172.30.22.0/24")
    m.program(local, moved)
    assert summary(bare_fake)["tunnels"] == [("172.30.1.1", "172.30.22.1", 10, 0),
                                        ("172.30.1.1", "172.30.3.1", 10, 0)]
    # then what only the old entry needed goes, as the controller does for a changed node
    assert m.unprogram(local, two, [moved, three]) == ["route 172.30.2.0/24"]
    removed = m.unprogram(local, three, [moved])
    # the tunnel, its L2 FIB entry (static entries outlive a tunnel in VPP), 2 neighbors, 3 routes
    assert len(removed) == 1 + 1 + 2 + 3, removed
    after = summary(bare_fake)
    assert after["tunnels"] == [("172.30.1.1", "172.30.22.1", 10, 0)]
    assert "10.1.3.0/24" not in dict(after["routes"])
    assert "10.1.2.0/24" in dict(after["routes"])

    restarted = mesh(api)  # a restarted agent: node 2 was removed while it was down
    assert len(restarted.prune(local, [])) == 1 + 1 + 2 + 3
    empty = summary(bare_fake)
    assert empty["tunnels"] == empty["fib"] == empty["neighbors"] == empty["routes"] == []
    bd = bare_fake.state.bridge_domains[BD]
    assert bd.fib.get("12:2b:00:00:00:01") is not None  # the BVI's own entry stays


def test_vpp_restart_changes_generation_and_program_rebuilds(
    bare_fake: FakeVPP, api: VppApi
) -> None:
    local, two = node(1), node(2)
    m = mesh(api)
    m.program(local, two)
    before = (m.generation(), summary(bare_fake))
    bare_fake.restart()
    with pytest.raises(Exception):  # noqa: B017 - the first call after a restart fails (11)
        api.call("control_ping")
    for ipv6 in (False, True):
        ip.add_table(api, POD_VRF, ipv6, "pods")  # the driver's base, made again
    m.program(local, two)
    assert m.generation() != before[0]
    assert summary(bare_fake) == before[1]


def test_on_interface_hears_of_the_bvi_once_per_connection(
    bare_fake: FakeVPP, api: VppApi
) -> None:
    local, two, three = node(1), node(2), node(3)
    told: list[int] = []
    m = VppMesh(api, POD_VRF, 0, ipaddress.ip_network("192.168.30.0/24"), bd_id=BD,
                on_interface=told.append)
    m.program(local, two)
    m.program(local, three)
    assert told == [m.bvi(local)]
    bare_fake.restart()
    with pytest.raises(Exception):  # noqa: B017 - the first call after a restart fails (11)
        api.call("control_ping")
    for ipv6 in (False, True):
        ip.add_table(api, POD_VRF, ipv6, "pods")
    m.program(local, two)
    assert len(told) == 2 and told[-1] == m.bvi(local)


def test_ipv4_only_pods_get_the_ipv6_pod_table_the_bvi_needs(bare_fake: FakeVPP) -> None:
    # As the driver leaves VPP for IPv4-only pods (base.ensure_tables): the IPv4 table only.
    # Seen on a real VPP: the BVI's move into the missing IPv6 table was refused (no such FIB).
    client = VppApi(bare_fake.socket_path, API_DIR, 2.0, 3.0, "test")
    try:
        ip.add_table(client, POD_VRF, False, "pods")
        v4 = IPAMConfig.from_mapping({})[0]
        local, two = (local_node(f"n{i}", f"192.168.16.{i}", node_networks(v4, i))
                      for i in (1, 2))
        mesh(client).program(local, two)
        assert (POD_VRF, True) in ip.tables(client)
        bvi = next(i for i in bare_fake.state.interfaces.values() if i.tag == BVI_TAG)
        assert bvi.vrf == {False: POD_VRF, True: POD_VRF} and bvi.flags & 1
        routes = dict(summary(bare_fake)["routes"])
        assert set(routes) == {"10.1.2.0/24", "172.30.2.0/24"}
        assert all("192.168.30.2" in hop for hop in routes.values()), routes
    finally:
        client.close()


@pytest.mark.parametrize("step", ["sw_interface_set_table", "sw_interface_add_del_address",
                                  "sw_interface_ip6_enable_disable",
                                  "feature_gso_enable_disable", "sw_interface_set_flags"])
def test_a_bvi_made_half_way_is_completed_by_the_next_try(
    bare_fake: FakeVPP, api: VppApi, step: str
) -> None:
    local, two = node(1), node(2)
    bare_fake.fail_once(step, -1)
    with pytest.raises(VppCallFailed):
        mesh(api).program(local, two)
    mesh(api).program(local, two)  # the controller's retry (a new VppMesh: an agent restart)
    bvis = [i for i in bare_fake.state.interfaces.values() if i.tag == BVI_TAG]
    assert len(bvis) == 1, bvis
    bvi = bvis[0]
    assert bvi.vrf == {False: POD_VRF, True: POD_VRF} and bvi.flags & 1 and bvi.gso
    assert [str(a) for a in bvi.addresses] == ["192.168.30.1/24"] and bvi.ip6_enabled
    assert summary(bare_fake)["tunnels"] == [("172.30.1.1", "172.30.2.1", 10, 0)]

"""The kernel half of the node mesh (agent/dataplane/kernel_mesh.py) in a node namespace.

Test plan: the VXLAN device has VNI 10, port 4789, the node IP as local address, no learning,
the node's MAC and the uplink MTU minus 50; programming two nodes twice leaves exactly one FDB
entry, two neighbors and three routes per node (its pod subnets, its VXLAN address; setting the
device up again must not flush the first node's neighbors); prune programs again nodes whose
objects were deleted behind the agent's back; unprogram removes one node and nothing of the
other; prune removes what no node explains (as after a restart); a pod MTU the uplink cannot
carry is refused with the largest that fits; without the node IP on any interface programming
fails naming it; the L2 interconnect routes via the node IP and makes no device; a prune (its
dumps of the whole route, neighbor and FDB tables) leaves no reference cycles behind.
"""

from __future__ import annotations

import gc
import subprocess
from collections.abc import Iterator

import pytest

from agent.dataplane.kernel_mesh import KernelMesh
from agent.model.errors import DataplaneFailure, InvalidConfig
from agent.model.node import NodeInfo, local_node
from ipam import IPAMConfig, node_networks
from testbed.netns import run_in

CFG = IPAMConfig.from_mapping({"PodSubnetV6CIDR": "fd00:10::/48"})[0]


def node(node_id: int) -> NodeInfo:
    return local_node(f"n{node_id}", f"192.168.16.{node_id}", node_networks(CFG, node_id),
                      f"02:00:00:00:00:{node_id:02x}")


@pytest.fixture
def uplink(node_ns: str) -> Iterator[str]:
    """eth0 with node 1's IP (MTU 1500) in the test's node namespace."""
    name = node_ns.rsplit("/", 1)[1]
    for argv in (["link", "add", "eth0", "type", "veth", "peer", "name", "eth0p"],
                 ["addr", "add", "192.168.16.1/24", "dev", "eth0"],
                 ["link", "set", "eth0", "up"], ["link", "set", "eth0p", "up"]):
        subprocess.run(["ip", "-n", name, *argv], check=True)
    yield node_ns


def state(ns: str) -> dict[str, list[str]]:
    def lines(*argv: str) -> list[str]:
        return sorted(x.strip() for x in run_in(ns, *argv).stdout.splitlines() if x.strip())

    return {
        "routes": lines("ip", "route", "show", "proto", "118")
        + lines("ip", "-6", "route", "show", "proto", "118"),
        "fdb": [x for x in lines("bridge", "fdb", "show", "dev", "vxlan-vsw") if " dst " in x],
        "neigh": [x for x in lines("ip", "neigh", "show", "nud", "permanent")
                  if "vxlan-vsw" in x or x.startswith("fe80::2b:")],
    }


def test_device_and_idempotent_programming(uplink: str) -> None:
    mesh = KernelMesh(1450)
    for _ in range(2):
        mesh.program(node(1), node(2))
        mesh.program(node(1), node(3))
    link = run_in(uplink, "ip", "-d", "link", "show", "vxlan-vsw").stdout
    for part in ("mtu 1450", "link/ether 12:2b:00:00:00:01", "vxlan id 10",
                 "local 192.168.16.1", "dstport 4789", "nolearning"):
        assert part in link, link
    got = state(uplink)
    assert got["fdb"] == ["12:2b:00:00:00:02 dst 192.168.16.2 self permanent",
                          "12:2b:00:00:00:03 dst 192.168.16.3 self permanent"]
    assert len(got["neigh"]) == 4 and len(got["routes"]) == 6, got
    assert any(r.startswith("fd00:10:0:2::/64 via fe80::2b:0:2 dev vxlan-vsw") for r in
               got["routes"])
    assert "192.168.30.2 dev vxlan-vsw scope link" in got["routes"], got

    before = state(uplink)
    run_in(uplink, "ip", "route", "del", "10.1.3.0/24")  # behind the agent's back
    run_in(uplink, "bridge", "fdb", "del", "12:2b:00:00:00:02", "dev", "vxlan-vsw",
           "dst", "192.168.16.2")
    assert state(uplink) != before
    assert mesh.prune(node(1), [node(2), node(3)]) == ["restored node n2", "restored node n3"]
    assert state(uplink) == before

    removed = mesh.unprogram(node(1), node(2), [node(3)])
    assert len(removed) == 6, removed  # 3 routes, 2 neighbors, 1 FDB entry
    left = state(uplink)
    marks = {"192.168.16.2", "192.168.30.2", "12:2b:00:00:00:02", "fe80::2b:0:2", "10.1.2.0/24",
             "fd00:10:0:2::/64"}
    assert [x for v in left.values() for x in v if marks & set(x.split())] == []
    assert (len(left["routes"]), len(left["fdb"]), len(left["neigh"])) == (3, 1, 2)

    assert len(KernelMesh(1450).prune(node(1), [])) == 6  # a restart that knows no node
    assert state(uplink) == {"routes": [], "fdb": [], "neigh": []}


def test_mtu_refused_with_the_largest_that_fits(uplink: str) -> None:
    KernelMesh(1450).check_mtu(node(1))
    with pytest.raises(InvalidConfig, match="MTUSize 1451 does not fit the uplink eth0") as err:
        KernelMesh(1451).check_mtu(node(1))
    assert "at most 1450" in str(err.value.details)
    KernelMesh(1500, l2_interconnect=True).check_mtu(node(1))


def test_no_uplink_fails_naming_the_node_ip(uplink: str) -> None:
    elsewhere = local_node("n9", "192.168.99.9", node_networks(CFG, 9))
    with pytest.raises(DataplaneFailure, match=r"node IP 192\.168\.99\.9 is on no interface"):
        KernelMesh(1450).program(elsewhere, node(2))


def test_l2_interconnect_routes_via_node_ips(uplink: str) -> None:
    mesh = KernelMesh(1450, l2_interconnect=True)
    mesh.program(node(1), node(2))
    got = state(uplink)
    assert "10.1.2.0/24 via 192.168.16.2 dev eth0 onlink" in got["routes"]
    assert any(r.startswith("fd00:10:0:2::/64 via fe80::2b:0:2 dev eth0") for r in got["routes"])
    assert got["neigh"] == ["fe80::2b:0:2 dev eth0 lladdr 02:00:00:00:00:02 PERMANENT"]
    assert run_in(uplink, "ip", "link", "show", "vxlan-vsw").returncode != 0
    assert len(mesh.unprogram(node(1), node(2), [])) == 3


def test_prune_leaves_no_garbage_cycles(uplink: str) -> None:
    """The mesh controller prunes every resync (30 s), dumping the node's whole route, neighbor
    and FDB tables. Those reads must leave nothing for the cyclic garbage collector: pyroute2's
    parsed messages are reference cycles, and on a node with ~600 routes one prune through it
    left ~33,000 objects waiting for a full collection, which grew the agent's RSS in the soak
    (docs/soak.md)."""
    for i in range(100):  # a table of some size: the dumps read every route
        run_in(uplink, "ip", "route", "add", f"10.250.{i}.0/24", "dev", "eth0")
    mesh = KernelMesh(1450)
    mesh.program(node(1), node(2))
    mesh.program(node(1), node(3))
    gc.collect()
    gc.disable()
    try:
        assert mesh.prune(node(1), [node(2), node(3)]) == []
        left = gc.collect()
    finally:
        gc.enable()
    assert left == 0

"""VPP's own WireGuard (agent/dataplane/vpp/wireguard.py) against the fake VPP (VPP 26.06's
wireguard messages); keys from the real `wg` (wireguard-tools).

Test plan: programming two remote nodes makes one wireguard interface (the node's key, port,
source its interconnect address; in the pod VRF, unnumbered to the pod gateway, GSO, MTU, up), a
peer per node (endpoint its interconnect address, keepalive on the lower ID's side, allowed IPs
its subnets, VXLAN address and IPv6 next hop) and routes (pod VRF through the interface, main VRF
into the pod VRF), once however often it is done; the private key is in no log line, even at
DEBUG (vpp-papi logs every request's fields there); a remote node's new key replaces its peer;
a rotation of this node's key makes the interface again and sets every peer and route again, and
`on_interface` (cnat, when VPP translates Services) hears of each interface once;
unprogram takes one node's objects; prune after an agent restart keeps what the nodes explain
and removes the rest; remove takes the interface and its routes.
"""

from __future__ import annotations

import base64
import ipaddress
import logging
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent.dataplane.vpp import interfaces, ip
from agent.dataplane.vpp.api import VppApi
from agent.dataplane.vpp.names import GATEWAY_TAG
from agent.dataplane.vpp.wireguard import VppWireGuard
from agent.linux.wireguard import KeyFile
from agent.model.node import NodeInfo, local_node
from ipam import IPAMConfig, node_networks
from tests.fakevpp import API_DIR, FakeVPP

CFG = IPAMConfig.from_mapping({"PodSubnetV6CIDR": "fd00:10::/48"})[0]
POD_VRF = 1
pytestmark = pytest.mark.skipif(shutil.which("wg") is None,
                                reason="needs wireguard-tools (make setup installs it)")


def node(node_id: int, key: str) -> NodeInfo:
    info = local_node(f"n{node_id}", f"192.168.16.{node_id}", node_networks(CFG, node_id))
    return replace(info, wg_public_key=key, wg_port=51820)


def new_key(tmp_path: Path, name: str) -> KeyFile:
    key = KeyFile(tmp_path / name / "wireguard.key")
    key.ensure()
    return key


@pytest.fixture
def api(bare_fake: FakeVPP) -> Iterator[VppApi]:
    client = VppApi(bare_fake.socket_path, API_DIR, 2.0, 3.0, "test")
    for ipv6 in (False, True):
        ip.add_table(client, POD_VRF, ipv6, "pods")
    gateway = interfaces.create_loopback(client, "02:00:00:00:00:01")  # the driver's, stood in for
    interfaces.set_tag(client, gateway, GATEWAY_TAG)
    yield client
    client.close()


def state(fake: FakeVPP) -> dict[str, list[str]]:
    s = fake.state
    wg = s.wireguard
    return {
        "interfaces": sorted(
            f"{s.get(sw).name} {base64.b64encode(public).decode()} port {port} src {src} "
            f"vrf {s.get(sw).vrf[False]}/{s.get(sw).vrf[True]} unnumbered "
            f"{s.get(sw).unnumbered_to} mtu {s.get(sw).mtu[0]} gso {s.get(sw).gso} "
            f"up {s.get(sw).flags & 1}"
            for sw, (_, public, port, src) in wg.interfaces.items()),
        "peers": sorted(
            f"{base64.b64encode(p['public_key']).decode()} {p['endpoint']}:{p['port']} "
            f"keepalive {p['persistent_keepalive']} table {p['table_id']} allowed "
            f"{' '.join(sorted(str(a) for a in p['allowed_ips']))}"
            for p in wg.peers.values()),
        "routes": sorted(
            f"{r.table_id} {r.prefix} "
            + (f"via {_hop(r.paths[0])} {s.get(r.paths[0]['sw_if_index']).name}"
               if r.paths[0]["sw_if_index"] != 0xFFFFFFFF else f"table {r.paths[0]['table_id']}")
            for r in s.routes.values()
            if r.paths and r.paths[0].get("type", 0) == 0 and str(r.prefix).startswith(
                ("10.1.", "fd00:10:", "172.30."))),
    }


def _hop(path: dict[str, Any]) -> str:
    return str(next(iter(path["nh"]["address"].values())))


def expected_peer(remote: NodeInfo, keepalive: int) -> str:
    i = remote.node_id
    allowed = sorted([f"10.1.{i}.0/24", f"172.30.{i}.0/24", f"192.168.30.{i}/32",
                      f"fd00:10:0:{i:x}::/64", f"fe80::2b:0:{i:x}/128"])
    return (f"{remote.wg_public_key} 172.30.{i}.1:51820 keepalive {keepalive} table 0 allowed "
            + " ".join(allowed))


def expected_routes(remote: NodeInfo, wg: str) -> list[str]:
    i = remote.node_id
    return [f"{POD_VRF} 10.1.{i}.0/24 via 192.168.30.{i} {wg}",
            f"{POD_VRF} 172.30.{i}.0/24 via 192.168.30.{i} {wg}",
            f"{POD_VRF} fd00:10:0:{i:x}::/64 via fe80::2b:0:{i:x} {wg}",
            f"0 10.1.{i}.0/24 table {POD_VRF}", f"0 fd00:10:0:{i:x}::/64 table {POD_VRF}"]


def test_program_makes_the_interface_peers_and_routes_once_and_logs_no_key(
    bare_fake: FakeVPP, api: VppApi, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    key = new_key(tmp_path, "n1")
    local = node(1, key.public())
    two, three = (node(i, new_key(tmp_path, f"n{i}").public()) for i in (2, 3))
    wg = VppWireGuard(api, key, 51820, POD_VRF, 0, 1420)
    for _ in range(2):  # the second round changes nothing
        wg.program(local, two)
        wg.program(local, three)
    got = state(bare_fake)
    gateway = interfaces.by_tag(api, GATEWAY_TAG)[0].sw_if_index
    assert got["interfaces"] == [f"wg0 {local.wg_public_key} port 51820 src 172.30.1.1 vrf "
                                 f"{POD_VRF}/{POD_VRF} unnumbered {gateway} mtu 1420 gso True "
                                 "up 1"]
    assert got["peers"] == sorted([expected_peer(two, 25), expected_peer(three, 25)])
    assert got["routes"] == sorted(expected_routes(two, "wg0") + expected_routes(three, "wg0"))
    assert wg.missing(local, [two, three]) == []
    private = key.path.read_text().strip()
    text = caplog.text
    assert private not in text and repr(base64.b64decode(private))[2:-1] not in text
    assert "VPP's WireGuard interface made" in text  # the log was captured


def test_keys_change_on_both_sides(bare_fake: FakeVPP, api: VppApi, tmp_path: Path) -> None:
    key = new_key(tmp_path, "n2")
    local = node(2, key.public())
    one = node(1, new_key(tmp_path, "n1").public())
    told: list[int] = []
    wg = VppWireGuard(api, key, 51820, POD_VRF, 0, 1420, on_interface=told.append)
    wg.program(local, one)
    assert state(bare_fake)["peers"] == [expected_peer(one, 0)]  # node 1 keeps it alive
    assert told == [wg.interface(local)]
    one_again = replace(one, wg_public_key=new_key(tmp_path, "n1-new").public())
    wg.program(local, one_again)  # node 1 rotated: its new key replaces the old peer
    assert state(bare_fake)["peers"] == [expected_peer(one_again, 0)]

    assert wg.refresh_local(local) is None  # the key file did not change
    key.rotate()
    fresh = wg.refresh_local(local)
    assert fresh is not None and fresh.wg_public_key == key.public() != local.wg_public_key
    got = state(bare_fake)
    assert [line.split()[1] for line in got["interfaces"]] == [fresh.wg_public_key]
    assert got["peers"] == [expected_peer(one_again, 0)]
    name = got["interfaces"][0].split()[0]
    assert got["routes"] == sorted(expected_routes(one_again, name))
    assert len(told) == 2 and told[-1] == wg.interface(fresh)  # the new interface


def test_unprogram_prune_and_remove(bare_fake: FakeVPP, api: VppApi, tmp_path: Path) -> None:
    key = new_key(tmp_path, "n1")
    local = node(1, key.public())
    two, three = (node(i, new_key(tmp_path, f"n{i}").public()) for i in (2, 3))
    wg = VppWireGuard(api, key, 51820, POD_VRF, 0, 1420)
    wg.program(local, two)
    wg.program(local, three)
    removed = wg.unprogram(local, three, keep=[two])
    assert "route 10.1.3.0/24 in table 0" in removed
    got = state(bare_fake)
    assert got["peers"] == [expected_peer(two, 25)]
    assert got["routes"] == sorted(expected_routes(two, "wg0"))

    wg.program(local, three)
    restarted = VppWireGuard(api, key, 51820, POD_VRF, 0, 1420)  # an agent restart
    assert restarted.prune(local, [two, three]) == []
    removed = restarted.prune(local, [two])
    assert any(r.startswith("peer ") for r in removed)
    assert state(bare_fake)["routes"] == sorted(expected_routes(two, "wg0"))
    assert restarted.missing(local, [two, three]) == [three]

    made = interfaces.by_name(api, "wg0")
    assert made is not None
    assert restarted.remove(local) == [f"WireGuard interface {made.sw_if_index}",
                                       "route 10.1.2.0/24 in table 0",
                                       "route fd00:10:0:2::/64 in table 0"]
    assert state(bare_fake) == {"interfaces": [], "peers": [], "routes": []}
    kept = ip.routes(api, 0, False)  # the main VRF keeps what is not the mesh's
    assert ipaddress.ip_network("10.1.2.0/24") not in kept

"""NodeInfo and the node IP rule (pure, no I/O).

Test plan: the node IP comes from NodeIP, else NODE_IP, else NodeInterconnectCIDR host N; a bad
value names its source; DHCP without either is NoNodeIP; entries round-trip through JSON and a
corrupt one is refused naming what is wrong (a WireGuard key that is no key among them); MACs and
IPv6 next hops are unique per node ID; key fingerprints are short and stable.
"""

from __future__ import annotations

import pytest

from agent.model.node import (
    NodeInfo,
    NodeInfoError,
    NoNodeIP,
    choose_node_ip,
    fingerprint,
    link_local,
    local_node,
    vxlan_mac,
)
from ipam import IPAMConfig, node_networks

CFG = IPAMConfig.from_mapping({"PodSubnetV6CIDR": "fd00:10::/48"})[0]


def test_node_ip_precedence() -> None:
    nets = node_networks(CFG, 3)
    assert choose_node_ip("10.0.0.5", {"NODE_IP": "10.0.0.6"}, nets) == "10.0.0.5"
    assert choose_node_ip("", {"NODE_IP": "10.0.0.6"}, nets) == "10.0.0.6"
    assert choose_node_ip("", {}, nets) == "192.168.16.3"
    assert choose_node_ip("10.0.0.7/24", {}, nets) == "10.0.0.7"
    with pytest.raises(NodeInfoError, match="NODE_IP 'bogus'"):
        choose_node_ip("", {"NODE_IP": "bogus"}, nets)


def test_dhcp_without_node_ip_is_no_node_ip() -> None:
    dhcp = IPAMConfig.from_mapping({"NodeInterconnectDHCP": True})[0]
    with pytest.raises(NoNodeIP):
        choose_node_ip("", {}, node_networks(dhcp, 1))


def test_entry_round_trip_and_refusals() -> None:
    info = local_node("n3", "192.168.16.3", node_networks(CFG, 3), "02:00:00:00:00:03")
    assert info.vxlan_ip == "192.168.30.3"
    assert info.pod_subnets == ("10.1.3.0/24", "fd00:10:0:3::/64")
    assert NodeInfo.from_json(info.to_json()) == info
    for broken in ({**info.to_json(), "nodeIP": "x"}, {**info.to_json(), "id": 0},
                   {k: v for k, v in info.to_json().items() if k != "podSubnets"}):
        with pytest.raises(NodeInfoError, match="bad registry entry"):
            NodeInfo.from_json(broken)


def test_macs_and_next_hops_per_node_id() -> None:
    assert vxlan_mac(2) == "12:2b:00:00:00:02"
    assert vxlan_mac(0x01020304) == "12:2b:01:02:03:04"
    assert link_local(2) == "fe80::2b:0:2"
    ids = range(1, 2000)
    assert len({vxlan_mac(i) for i in ids}) == len({link_local(i) for i in ids}) == len(ids)


KEY = "XbcIPClV/lryzgUfx0kXxq7av4CtNUanlzBkY2MHr0k="


def test_wireguard_key_in_the_entry() -> None:
    nets = node_networks(CFG, 3)
    plain = local_node("n3", "192.168.16.3", nets, wg_port=51820)
    assert "wireguard" not in plain.to_json() and plain.wg_port == 0  # no key: no port
    info = local_node("n3", "192.168.16.3", nets, wg_public_key=KEY, wg_port=51820)
    assert info.to_json()["wireguard"] == {"publicKey": KEY, "port": 51820}
    assert NodeInfo.from_json(info.to_json()) == info
    for bad in ({"publicKey": "not-a-key", "port": 51820}, {"publicKey": KEY[:-4], "port": 1},
                {"publicKey": KEY, "port": 0}, {"publicKey": KEY, "port": 70000}, "x"):
        with pytest.raises(NodeInfoError, match="bad registry entry"):
            NodeInfo.from_json({**info.to_json(), "wireguard": bad})


def test_fingerprints() -> None:
    assert fingerprint("") == ""
    assert fingerprint(KEY) == fingerprint(KEY)
    assert len(fingerprint(KEY)) == 19 and fingerprint(KEY).count(":") == 3
    other = "9MGgfGzLE0N6lYmgA+OL1SuyC/Np8/eGeXLbfbp9IW4="
    assert fingerprint(other) != fingerprint(KEY)

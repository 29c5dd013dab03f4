"""Node subnets from node IDs.

Test plan: node subnets of different IDs never overlap (v4, v6, dual stack) and lie inside the
cluster subnets; gateway, VPP-host ends, interconnect and VXLAN addresses follow Contiv's rules;
IDs out of range are refused naming the bound; the gateway of the interconnect is skipped.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from ipam import ConfigError, IPAMConfig, max_node_id, node_networks

CONFIGS = [
    {},
    {"PodSubnetCIDR": "fd00:1::/48", "VPPHostSubnetCIDR": "fd00:2::/96",
     "NodeInterconnectCIDR": "fd00:3::/120", "VxlanCIDR": "fd00:4::/120",
     "ServiceCIDR": "fd00:5::/108"},
    {"PodSubnetV6CIDR": "fd00:10::/48"},
    {"PodSubnetV6CIDR": "fd00:10::/56", "PodNetworkV6PrefixLen": 64, "PodNetworkPrefixLen": 25,
     "NodeInterconnectCIDR": "192.168.16.0/22", "VxlanCIDR": "192.168.32.0/22",
     "VPPHostNetworkPrefixLen": 25},
    {"ContivCIDR": "10.128.0.0/14"},
]


@given(st.sampled_from(CONFIGS), st.data())
def test_node_subnets_of_different_ids_never_overlap(raw: dict[str, object],
                                                     data: st.DataObject) -> None:
    cfg, _ = IPAMConfig.from_mapping(raw)
    top = max_node_id(cfg)
    a = data.draw(st.integers(min_value=1, max_value=top))
    b = data.draw(st.integers(min_value=1, max_value=top))
    assume(a != b)
    na, nb = node_networks(cfg, a), node_networks(cfg, b)
    for sa, sb in zip(na.pod_subnets, nb.pod_subnets, strict=True):
        assert not sa.overlaps(sb)
    assert not na.vpp_host_subnet.overlaps(nb.vpp_host_subnet)
    assert na.vxlan_ip.ip != nb.vxlan_ip.ip
    assert na.node_interconnect_ip != nb.node_interconnect_ip
    clusters = [net for _, net, _ in cfg.pod_subnets()]
    assert len(na.pod_subnets) == len(clusters)
    for subnet, cluster, gateway in zip(na.pod_subnets, clusters, na.gateways, strict=True):
        assert subnet.subnet_of(cluster)  # type: ignore[arg-type]
        assert gateway == subnet[1]
    for iface in (na.node_interconnect_ip, na.vxlan_ip):
        assert iface is not None
        assert iface.ip != iface.network.network_address
        if iface.version == 4:
            assert iface.ip != iface.network.broadcast_address


def test_node_one_follows_contivs_rules() -> None:
    cfg, _ = IPAMConfig.from_mapping({})
    n = node_networks(cfg, 1)
    assert [str(s) for s in n.pod_subnets] == ["10.1.1.0/24"]
    assert [str(g) for g in n.gateways] == ["10.1.1.1"]
    assert str(n.vpp_host_subnet) == "172.30.1.0/24"
    assert str(n.vpp_host_ip) == "172.30.1.1/24" and str(n.host_linux_ip) == "172.30.1.2/24"
    assert str(n.node_interconnect_ip) == "192.168.16.1/24"
    assert str(n.vxlan_ip) == "192.168.30.1/24"


def test_dual_stack_gives_one_subnet_per_family() -> None:
    cfg, _ = IPAMConfig.from_mapping({"PodSubnetV6CIDR": "fd00:10::/48"})
    n = node_networks(cfg, 7)
    assert [s.version for s in n.pod_subnets] == [4, 6]
    assert str(n.pod_subnets[1]) == "fd00:10:0:7::/64"


def test_last_id_takes_subnet_zero_like_contiv() -> None:
    cfg, _ = IPAMConfig.from_mapping({"NodeInterconnectCIDR": "192.168.16.0/23",
                                      "VxlanCIDR": "192.168.30.0/23"})
    assert max_node_id(cfg) == 256  # limited by the 256 /24s of the /16 pod subnet
    assert str(node_networks(cfg, 256).pod_subnets[0]) == "10.1.0.0/24"


@pytest.mark.parametrize("node_id", [0, -1, 255, 10**6])
def test_out_of_range_ids_name_the_bound(node_id: int) -> None:
    cfg, _ = IPAMConfig.from_mapping({})
    with pytest.raises(ConfigError, match="between 1 and 254"):
        node_networks(cfg, node_id)


def test_dhcp_interconnect_has_no_address() -> None:
    cfg, _ = IPAMConfig.from_mapping({"NodeInterconnectDHCP": True})
    assert node_networks(cfg, 3).node_interconnect_ip is None
    assert max_node_id(cfg) == 254  # VXLAN /24 still limits


def test_default_gateway_is_skipped() -> None:
    cfg, _ = IPAMConfig.from_mapping({"DefaultGateway": "192.168.16.3"})
    ips = [node_networks(cfg, i).node_interconnect_ip for i in range(1, 6)]
    got = [str(ip.ip) for ip in ips if ip is not None]
    assert got == ["192.168.16.1", "192.168.16.2", "192.168.16.4", "192.168.16.5",
                   "192.168.16.6"]
    assert max_node_id(cfg) == 253
    last = node_networks(cfg, 253).node_interconnect_ip
    assert last is not None and last.ip == ipaddress.ip_address("192.168.16.254")

"""IPAMConfig parsing.

Test plan: Contiv's defaults; every refusal (bad CIDR, host bits, unknown key, duplicate alias,
overlap, prefix lengths that do not fit, wrong types) is a ConfigError with CNI code 7 naming the
key; accepted-but-ignored keys give warnings naming them; ContivCIDR carves Contiv's layout;
to_contiv_json uses the REST key names.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ipam import ConfigError, IPAMConfig, max_node_id


def test_defaults_are_contivs() -> None:
    cfg, warnings = IPAMConfig.from_mapping({})
    assert warnings == []
    assert cfg.to_contiv_json() == {
        "podSubnetCIDR": "10.1.0.0/16", "podNetworkPrefixLen": 24,
        "podSubnetV6CIDR": "", "podNetworkV6PrefixLen": 0,
        "vppHostSubnetCIDR": "172.30.0.0/16", "vppHostNetworkPrefixLen": 24,
        "nodeInterconnectCIDR": "192.168.16.0/24", "nodeInterconnectDHCP": False,
        "vxlanCIDR": "192.168.30.0/24", "serviceCIDR": "10.96.0.0/12",
        "contivCIDR": "", "defaultGateway": "",
    }
    assert max_node_id(cfg) == 254  # .255 of the /24 interconnect is broadcast


@pytest.mark.parametrize(
    ("mapping", "key"),
    [
        ({"PodSubnetCIDR": "10.1.0.1/16"}, "PodSubnetCIDR"),
        ({"PodSubnetCIDR": "not-a-cidr"}, "PodSubnetCIDR"),
        ({"PodSubnetCIDR": 17}, "PodSubnetCIDR"),
        ({"VxlanCIDR": "10.1.200.0/24"}, "VxlanCIDR"),
        ({"ServiceCIDR": "10.0.0.0/8"}, "ServiceCIDR"),
        ({"PodNetworkPrefixLen": 16}, "PodNetworkPrefixLen"),
        ({"PodNetworkPrefixLen": 30}, "PodNetworkPrefixLen"),
        ({"PodNetworkPrefixLen": 33}, "PodNetworkPrefixLen"),
        ({"PodNetworkPrefixLen": "x"}, "PodNetworkPrefixLen"),
        ({"PodNetworkPrefixLen": True}, "PodNetworkPrefixLen"),
        ({"VPPHostNetworkPrefixLen": 31}, "VPPHostNetworkPrefixLen"),
        ({"NodeInterconnectDHCP": "maybe"}, "NodeInterconnectDHCP"),
        ({"NodeInterconnectCIDR": "192.168.16.0/31"}, "NodeInterconnectCIDR"),
        ({"PodSubnetV6CIDR": "10.9.0.0/16"}, "PodSubnetV6CIDR"),
        ({"PodSubnetV6CIDR": "fd00::/64", "PodNetworkV6PrefixLen": 64}, "PodNetworkV6PrefixLen"),
        ({"ContivCIDR": "10.128.0.0/16"}, "ContivCIDR"),
        ({"DefaultGateway": "192.168.99.1"}, "DefaultGateway"),
        ({"DefaultGateway": "nope"}, "DefaultGateway"),
        ({"UseExternalIPAM": True}, "UseExternalIPAM"),
        ({"PodSubnetCIDRs": "10.1.0.0/16"}, "PodSubnetCIDRs"),
        ({"PodNetworkPrefixLen": 24, "podSubnetOneNodePrefixLen": 24}, "podSubnetOneNodePrefixLen"),
    ],
)
def test_refusals_name_the_key(mapping: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        IPAMConfig.from_mapping(mapping)
    assert info.value.key == key
    assert key in str(info.value)
    assert info.value.code == 7


@given(st.sampled_from(["PodSubnetCIDR", "VPPHostSubnetCIDR", "VxlanCIDR", "ServiceCIDR",
                        "NodeInterconnectCIDR", "ContivCIDR", "PodSubnetV6CIDR"]),
       st.one_of(st.text(max_size=20), st.integers(), st.none(), st.lists(st.integers())))
def test_garbage_values_are_refused_by_key(key: str, value: object) -> None:
    try:
        IPAMConfig.from_mapping({key: value})
    except ConfigError as exc:
        assert key in str(exc)
        assert str(exc).startswith("IPAMConfig.")
    # a value that parses is a valid config: nothing to assert beyond "no other exception"


def test_ignored_keys_warn_by_name() -> None:
    cfg, warnings = IPAMConfig.from_mapping({"SRv6": {"x": 1}, "UseExternalIPAM": False})
    assert any("SRv6" in w for w in warnings)
    assert cfg == IPAMConfig.from_mapping({})[0]


def test_camel_case_and_contiv3_aliases_are_accepted() -> None:
    cfg, _ = IPAMConfig.from_mapping({"podSubnetCIDR": "10.2.0.0/16",
                                      "PodSubnetOneNodePrefixLen": 25,
                                      "nodeInterconnectDHCP": "true"})
    assert cfg.pod_subnet_cidr == ipaddress.ip_network("10.2.0.0/16")
    assert cfg.pod_network_prefix_len == 25 and cfg.node_interconnect_dhcp


def test_contiv_cidr_carves_contivs_layout() -> None:
    cfg, warnings = IPAMConfig.from_mapping({"ContivCIDR": "10.128.0.0/14",
                                             "PodSubnetCIDR": "10.1.0.0/16"})
    assert any("PodSubnetCIDR" in w for w in warnings)
    j = cfg.to_contiv_json()
    assert j["podSubnetCIDR"] == "10.128.0.0/16" and j["podNetworkPrefixLen"] == 25
    assert j["vppHostSubnetCIDR"] == "10.129.0.0/16" and j["vppHostNetworkPrefixLen"] == 25
    assert j["nodeInterconnectCIDR"] == "10.130.0.0/23"
    assert j["vxlanCIDR"] == "10.130.2.0/23"
    assert j["contivCIDR"] == "10.128.0.0/14"
    kept, _ = IPAMConfig.from_mapping({"ContivCIDR": "10.128.0.0/14",
                                       "NodeInterconnectCIDR": "192.168.5.0/24"})
    assert str(kept.node_interconnect_cidr) == "192.168.5.0/24"


def test_ipv6_single_stack_gets_ipv6_sized_defaults() -> None:
    cfg, _ = IPAMConfig.from_mapping({"PodSubnetCIDR": "fd00:1::/48",
                                      "VPPHostSubnetCIDR": "fd00:2::/96"})
    assert cfg.pod_network_prefix_len == 64 and cfg.vpp_host_network_prefix_len == 112


# ---- issue 23, defect 6: address ranges no subnet of the plan can use -----------------------

@pytest.mark.parametrize(
    ("mapping", "key", "why"),
    [
        ({"PodSubnetCIDR": "127.0.0.0/16"}, "PodSubnetCIDR", "loopback"),
        ({"PodSubnetCIDR": "224.0.0.0/16"}, "PodSubnetCIDR", "multicast"),
        ({"PodSubnetCIDR": "169.254.0.0/16"}, "PodSubnetCIDR", "link-local"),
        ({"PodSubnetCIDR": "0.0.0.0/16"}, "PodSubnetCIDR", "unspecified"),
        ({"PodSubnetCIDR": "240.0.0.0/16"}, "PodSubnetCIDR", "reserved"),
        ({"PodSubnetCIDR": "120.0.0.0/5"}, "PodSubnetCIDR", "loopback"),  # holds 127/8
        ({"VPPHostSubnetCIDR": "169.254.0.0/16"}, "VPPHostSubnetCIDR", "link-local"),
        ({"NodeInterconnectCIDR": "127.0.5.0/24"}, "NodeInterconnectCIDR", "loopback"),
        ({"VxlanCIDR": "239.1.1.0/24"}, "VxlanCIDR", "multicast"),
        ({"ServiceCIDR": "255.255.0.0/16"}, "ServiceCIDR", "reserved"),
        ({"ContivCIDR": "127.0.0.0/8"}, "ContivCIDR", "loopback"),
        ({"PodSubnetV6CIDR": "fe80::/48"}, "PodSubnetV6CIDR", "link-local"),
        ({"PodSubnetV6CIDR": "ff05::/48"}, "PodSubnetV6CIDR", "multicast"),
        ({"PodSubnetV6CIDR": "::/48"}, "PodSubnetV6CIDR", "unspecified"),
        ({"PodSubnetV6CIDR": "4000::/48"}, "PodSubnetV6CIDR", "reserved"),
        ({"PodSubnetCIDR": "::ffff:0:0/96", "VPPHostSubnetCIDR": "fd00:2::/96"},
         "PodSubnetCIDR", "reserved"),
        ({"PodSubnetCIDR": "fd00:1::/48", "VPPHostSubnetCIDR": "::1/128"},
         "VPPHostSubnetCIDR", "loopback"),
    ],
)
def test_ranges_that_cannot_carry_pods_or_nodes_are_refused(
        mapping: dict[str, object], key: str, why: str) -> None:
    with pytest.raises(ConfigError) as info:
        IPAMConfig.from_mapping(mapping)
    assert info.value.key == key
    assert info.value.code == 7
    assert why in info.value.reason and str(mapping[key]) in str(info.value)


def test_unused_interconnect_range_is_not_judged() -> None:
    # NodeInterconnectDHCP: the CIDR assigns nothing (warned about), so it cannot break anything
    cfg, warnings = IPAMConfig.from_mapping({"NodeInterconnectDHCP": True,
                                             "NodeInterconnectCIDR": "127.0.5.0/24"})
    assert cfg.node_interconnect_dhcp and any("NodeInterconnectCIDR" in w for w in warnings)

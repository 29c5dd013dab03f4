"""Whole-config checks of the address plan (`AddressPlan`, ipam/plan.py): usable ranges, prefix
lengths that fit, no overlaps, room for a node.

Run once at start (`IPAMConfig.from_mapping` calls it); a refusal names the key, the value and
what to change. Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from itertools import combinations

from ipam._parse import ConfigError, IPNetwork
from ipam.plan import AddressPlan
from ipam.subnets import node_id_bounds

# Host numbers a per-node subnet must hold beside its pods or interconnect ends.
_MIN_POD_ADDRESSES = 8  # network, gateway, reserved last, broadcast + at least 4 pods
_MIN_HOST_ADDRESSES = 4  # network, VPP end, Linux end, broadcast


# Ranges no subnet of the plan may touch: a pod, a node end, a VXLAN end or a Service address
# there cannot work (the kernel and VPP drop or refuse loopback, multicast, link-local and
# unspecified sources; reserved space is routed nowhere). IPv6's reserved blocks are IANA's
# "Reserved by IETF" (Python's ipaddress: is_reserved). More specific entries come first.
_UNUSABLE: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(net), why) for net, why in [
        ("0.0.0.0/8", "unspecified space ('this network', RFC 1122: no host has such an address)"),
        ("127.0.0.0/8", "loopback space (never leaves a host)"),
        ("169.254.0.0/16", "link-local space (never routed off a link)"),
        ("224.0.0.0/4", "multicast space (no interface address)"),
        ("240.0.0.0/4", "reserved space (class E and 255.255.255.255: routed nowhere)"),
        ("::/128", "the unspecified address (no host has it)"),
        ("::1/128", "loopback space (never leaves a host)"),
        ("fe80::/10", "link-local space (never routed off a link)"),
        ("ff00::/8", "multicast space (no interface address)"),
        *((str(net), "space reserved by the IETF (routed nowhere)")
          for net in ("::/8", "100::/8", "200::/7", "400::/6", "800::/5", "1000::/4", "4000::/3",
                      "6000::/3", "8000::/3", "a000::/3", "c000::/3", "e000::/4", "f000::/5",
                      "f800::/6", "fe00::/9")),
    ])


def _check_usable(cfg: AddressPlan) -> None:
    """Every subnet the plan uses lies outside the unusable ranges (ContivCIDR first: the
    subnets it carves are inside it, and the key to change is its)."""
    subnets: list[tuple[str, IPNetwork]] = []
    if cfg.contiv_cidr is not None:
        subnets.append(("ContivCIDR", cfg.contiv_cidr))
    subnets += [(key, net) for key, net, _ in cfg.pod_subnets()]
    subnets.append(("VPPHostSubnetCIDR", cfg.vpp_host_subnet_cidr))
    if not cfg.node_interconnect_dhcp and cfg.node_interconnect_cidr is not None:
        subnets.append(("NodeInterconnectCIDR", cfg.node_interconnect_cidr))
    subnets += [("VxlanCIDR", cfg.vxlan_cidr), ("ServiceCIDR", cfg.service_cidr)]
    for key, net in subnets:
        for bad, why in _UNUSABLE:
            if net.version == bad.version and net.overlaps(bad):
                # CIDR blocks nest: overlapping and no shorter means inside
                where = "is" if net.prefixlen >= bad.prefixlen else f"overlaps {bad},"
                raise ConfigError(key, str(net), f"{where} {why}; use unicast space such as "
                                  "10.0.0.0/8 or fd00::/8")


def _check_split(cluster_key: str, cluster: IPNetwork, len_key: str, plen: int,
                 min_addresses: int) -> None:
    """The per-node prefix must cut the cluster subnet and leave `min_addresses` per node."""
    if plen > cluster.max_prefixlen:
        raise ConfigError(len_key, plen, f"longer than an IPv{cluster.version} address "
                          f"({cluster.max_prefixlen} bits) of {cluster_key} {cluster}")
    if plen <= cluster.prefixlen:
        raise ConfigError(len_key, plen, f"must be longer than the /{cluster.prefixlen} of "
                          f"{cluster_key} {cluster}, so that each node gets a part of it")
    if 1 << (cluster.max_prefixlen - plen) < min_addresses:
        longest = cluster.max_prefixlen - (min_addresses - 1).bit_length()
        raise ConfigError(len_key, plen, f"leaves fewer than {min_addresses} addresses per "
                          f"node; use /{longest} or shorter")


def _check_overlaps(cfg: AddressPlan) -> None:
    subnets: list[tuple[str, IPNetwork]] = [(key, net) for key, net, _ in cfg.pod_subnets()]
    subnets.append(("VPPHostSubnetCIDR", cfg.vpp_host_subnet_cidr))
    if not cfg.node_interconnect_dhcp and cfg.node_interconnect_cidr is not None:
        subnets.append(("NodeInterconnectCIDR", cfg.node_interconnect_cidr))
    subnets.append(("VxlanCIDR", cfg.vxlan_cidr))
    subnets.append(("ServiceCIDR", cfg.service_cidr))
    for (key_a, net_a), (key_b, net_b) in combinations(subnets, 2):
        if net_a.version == net_b.version and net_a.overlaps(net_b):
            raise ConfigError(key_b, str(net_b), f"overlaps {key_a} {net_a}; "
                              "every subnet must be disjoint")


def _check_gateway(cfg: AddressPlan) -> None:
    gateway, subnet = cfg.default_gateway, cfg.node_interconnect_cidr
    if gateway is None or subnet is None or cfg.node_interconnect_dhcp:
        return
    if gateway.version == subnet.version and gateway not in subnet:
        raise ConfigError("DefaultGateway", str(gateway),
                          f"not inside NodeInterconnectCIDR {subnet}")


def validate_config(cfg: AddressPlan) -> None:
    _check_usable(cfg)
    for key, net, plen in cfg.pod_subnets():
        len_key = "PodNetworkV6PrefixLen" if key == "PodSubnetV6CIDR" else "PodNetworkPrefixLen"
        _check_split(key, net, len_key, plen, _MIN_POD_ADDRESSES)
    _check_split("VPPHostSubnetCIDR", cfg.vpp_host_subnet_cidr, "VPPHostNetworkPrefixLen",
                 cfg.vpp_host_network_prefix_len, _MIN_HOST_ADDRESSES)
    _check_overlaps(cfg)
    _check_gateway(cfg)
    bound, key = min(node_id_bounds(cfg))
    if bound < 1:
        value = cfg.vxlan_cidr if key == "VxlanCIDR" else cfg.node_interconnect_cidr
        raise ConfigError(key, str(value), "leaves room for no node; use a larger subnet")

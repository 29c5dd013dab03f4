"""The cluster address plan as a typed value: `AddressPlan`, its fields with Contiv's defaults and
what follows from the fields alone (the pod subnets per family, Contiv's JSON spelling).

The rest of IPAM reads this type: subnets.py derives a node's addresses from it, validate.py
checks it, config.py parses the YAML into its subclass `IPAMConfig`. It lives apart from config.py
so that those two can name it without importing config.py, which calls them (no import circle in
ipam). Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ipam._parse import IPNetwork

# Contiv's defaults (module constants: a dataclass default must be an immutable value).
_POD: IPNetwork = ipaddress.IPv4Network("10.1.0.0/16")
_VPP_HOST: IPNetwork = ipaddress.IPv4Network("172.30.0.0/16")
_INTERCONNECT: IPNetwork = ipaddress.IPv4Network("192.168.16.0/24")
_VXLAN: IPNetwork = ipaddress.IPv4Network("192.168.30.0/24")
_SERVICE: IPNetwork = ipaddress.IPv4Network("10.96.0.0/12")

DEFAULT_V6_POD_PREFIX = 64  # a /64 per node keeps SLAAC-sized subnets
DEFAULT_V6_HOST_PREFIX = 112


@dataclass(frozen=True)
class AddressPlan:
    """Cluster-wide address plan; every node derives its own subnets from it and its node ID."""

    pod_subnet_cidr: IPNetwork = _POD
    pod_network_prefix_len: int = 24
    pod_subnet_v6_cidr: ipaddress.IPv6Network | None = None
    pod_network_v6_prefix_len: int | None = None
    vpp_host_subnet_cidr: IPNetwork = _VPP_HOST
    vpp_host_network_prefix_len: int = 24
    node_interconnect_cidr: IPNetwork | None = _INTERCONNECT
    node_interconnect_dhcp: bool = False
    vxlan_cidr: IPNetwork = _VXLAN
    service_cidr: IPNetwork = _SERVICE
    contiv_cidr: IPNetwork | None = None
    default_gateway: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None

    def pod_subnets(self) -> tuple[tuple[str, IPNetwork, int], ...]:
        """(key, cluster pod subnet, per-node prefix length) per address family, primary first."""
        out: list[tuple[str, IPNetwork, int]] = [
            ("PodSubnetCIDR", self.pod_subnet_cidr, self.pod_network_prefix_len)]
        if self.pod_subnet_v6_cidr is not None:
            v6_len = self.pod_network_v6_prefix_len or DEFAULT_V6_POD_PREFIX
            out.append(("PodSubnetV6CIDR", self.pod_subnet_v6_cidr, v6_len))
        return tuple(out)

    def to_contiv_json(self) -> dict[str, object]:
        """The config as Contiv's REST answer spells it (camelCase; "" for an unset CIDR)."""

        def text(value: object | None) -> str:
            return "" if value is None else str(value)

        return {
            "podSubnetCIDR": str(self.pod_subnet_cidr),
            "podNetworkPrefixLen": self.pod_network_prefix_len,
            "podSubnetV6CIDR": text(self.pod_subnet_v6_cidr),
            "podNetworkV6PrefixLen": self.pod_network_v6_prefix_len or 0,
            "vppHostSubnetCIDR": str(self.vpp_host_subnet_cidr),
            "vppHostNetworkPrefixLen": self.vpp_host_network_prefix_len,
            "nodeInterconnectCIDR": text(self.node_interconnect_cidr),
            "nodeInterconnectDHCP": self.node_interconnect_dhcp,
            "vxlanCIDR": str(self.vxlan_cidr),
            "serviceCIDR": str(self.service_cidr),
            "contivCIDR": text(self.contiv_cidr),
            "defaultGateway": text(self.default_gateway),
        }

"""The `IPAMConfig:` section of the agent's YAML: parsed, validated and typed once at start.

Keys follow Contiv-VPP's `contiv.yaml` (PascalCase; matched case-insensitively so that the camelCase
spelling of Contiv's later JSON config is accepted too) with Contiv's defaults (the fields and their
defaults: `AddressPlan` in ipam/plan.py, which `IPAMConfig` extends). `ContivCIDR` carves
every subnet out of one block the way Contiv did (see `_carve_contiv_cidr`). Our extension for dual
stack is `PodSubnetV6CIDR` + `PodNetworkV6PrefixLen`: a pod then gets one address per family.

Pure: no I/O. Every refusal is a `ConfigError` naming the key, the value and why.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from ipam._parse import (
    ConfigError,
    IPNetwork,
    parse_bool,
    parse_gateway,
    parse_network,
    parse_prefix_len,
)
from ipam.plan import DEFAULT_V6_HOST_PREFIX, DEFAULT_V6_POD_PREFIX, AddressPlan
from ipam.validate import validate_config

# Canonical key -> dataclass field. Lookup is case-insensitive (see `_canonical_keys`).
_KEYS: dict[str, str] = {
    "PodSubnetCIDR": "pod_subnet_cidr",
    "PodNetworkPrefixLen": "pod_network_prefix_len",
    "PodSubnetV6CIDR": "pod_subnet_v6_cidr",
    "PodNetworkV6PrefixLen": "pod_network_v6_prefix_len",
    "VPPHostSubnetCIDR": "vpp_host_subnet_cidr",
    "VPPHostNetworkPrefixLen": "vpp_host_network_prefix_len",
    "NodeInterconnectCIDR": "node_interconnect_cidr",
    "NodeInterconnectDHCP": "node_interconnect_dhcp",
    "VxlanCIDR": "vxlan_cidr",
    "ServiceCIDR": "service_cidr",
    "ContivCIDR": "contiv_cidr",
    "DefaultGateway": "default_gateway",
}
# Contiv 3.x renamed the per-node prefix keys; both spellings mean the same field.
_ALIASES: dict[str, str] = {
    "PodSubnetOneNodePrefixLen": "PodNetworkPrefixLen",
    "VPPHostSubnetOneNodePrefixLen": "VPPHostNetworkPrefixLen",
}
# Contiv keys we accept but do not act on: warned about by name, never silently dropped.
_IGNORED: dict[str, str] = {
    "SRv6": "SRv6 interconnect is not implemented; the SRv6 subnets are ignored",
}
_CARVED = ("PodSubnetCIDR", "PodNetworkPrefixLen", "VPPHostSubnetCIDR",
           "VPPHostNetworkPrefixLen", "VxlanCIDR")


@dataclass(frozen=True)
class IPAMConfig(AddressPlan):
    """The address plan as the `IPAMConfig:` section gives it: parsed and checked by
    `from_mapping`. The fields, their defaults and what follows from them are AddressPlan's
    (ipam/plan.py); this subclass adds only the parsing and the checks. They stay off
    AddressPlan because validate.py and subnets.py import AddressPlan, and these call them."""

    @classmethod
    def from_mapping(cls, m: Mapping[str, object]) -> tuple[IPAMConfig, list[str]]:
        """Parses the `IPAMConfig:` mapping; returns the config and warnings for ignored keys."""
        if not isinstance(m, Mapping):
            raise ConfigError("IPAMConfig", m, "must be a mapping of keys to values")
        given, warnings = _canonical_keys(m)
        values: dict[str, Any] = {}
        for key, raw in given.items():
            values[_KEYS[key]] = _parse_value(key, raw)
        cfg = cls(**values)
        cfg = _apply_family_defaults(cfg, given)
        if cfg.contiv_cidr is not None:
            warnings += [f"IPAMConfig.{k} is ignored: ContivCIDR carves it" for k in _CARVED
                         if k in given]
            cfg = _carve_contiv_cidr(cfg, "NodeInterconnectCIDR" in given)
        if cfg.node_interconnect_dhcp and "NodeInterconnectCIDR" in given:
            warnings.append("IPAMConfig.NodeInterconnectCIDR assigns no address: "
                            "NodeInterconnectDHCP is true")
        cfg.validate()
        return cfg, warnings

    def validate(self) -> None:
        """Checks prefix lengths, overlaps and the node-ID range; raises ConfigError."""
        validate_config(self)


def _canonical_keys(m: Mapping[str, object]) -> tuple[dict[str, object], list[str]]:
    """Maps each given key to its canonical spelling; refuses unknown and duplicate keys."""
    lookup = {k.lower(): k for k in _KEYS} | {k.lower(): v for k, v in _ALIASES.items()}
    ignored = {k.lower(): k for k in _IGNORED}
    given: dict[str, object] = {}
    spelled: dict[str, str] = {}
    warnings: list[str] = []
    for key, raw in m.items():
        low = str(key).lower()
        if low == "useexternalipam":
            if parse_bool(str(key), raw):
                raise ConfigError(str(key), raw, "external IPAM is not supported")
            continue
        if low in ignored:
            warnings.append(f"IPAMConfig.{key} is ignored: {_IGNORED[ignored[low]]}")
            continue
        if low not in lookup:
            raise ConfigError(str(key), raw, f"unknown key; known keys: {', '.join(_KEYS)}")
        canon = lookup[low]
        if canon in given:
            raise ConfigError(str(key), raw, f"given twice (also as {spelled[canon]})")
        given[canon] = raw
        spelled[canon] = str(key)
    return given, warnings


def _parse_value(key: str, raw: object) -> object:
    field = _KEYS[key]
    if field.endswith("_prefix_len"):
        return parse_prefix_len(key, raw)
    if field == "node_interconnect_dhcp":
        return parse_bool(key, raw)
    if field == "default_gateway":
        return parse_gateway(key, raw)
    net = parse_network(key, raw)
    if field == "pod_subnet_v6_cidr" and net.version != 6:
        raise ConfigError(key, raw, "must be an IPv6 subnet (PodSubnetCIDR holds the IPv4 one)")
    return net


def _apply_family_defaults(cfg: IPAMConfig, given: Mapping[str, object]) -> IPAMConfig:
    """Contiv's /24 defaults make no sense for an IPv6 subnet: pick IPv6-sized ones instead."""
    changes: dict[str, Any] = {}
    if cfg.pod_subnet_cidr.version == 6 and "PodNetworkPrefixLen" not in given:
        changes["pod_network_prefix_len"] = DEFAULT_V6_POD_PREFIX
    if cfg.vpp_host_subnet_cidr.version == 6 and "VPPHostNetworkPrefixLen" not in given:
        changes["vpp_host_network_prefix_len"] = DEFAULT_V6_HOST_PREFIX
    if cfg.pod_subnet_v6_cidr is not None and cfg.pod_network_v6_prefix_len is None:
        changes["pod_network_v6_prefix_len"] = DEFAULT_V6_POD_PREFIX
    return replace(cfg, **changes) if changes else cfg


def _carve_contiv_cidr(cfg: IPAMConfig, interconnect_given: bool) -> IPAMConfig:
    """Contiv's ContivCIDR rule: of a block with at least 18 host bits, the first two 16-bit
    blocks are the pod and VPP-host subnets (7 host bits per node); the 9-bit blocks number 256 and
    257 are the node interconnect (unless given or DHCP) and VXLAN subnets."""
    block = cfg.contiv_cidr
    assert block is not None
    host_bits = block.max_prefixlen - block.prefixlen
    if host_bits < 18:
        raise ConfigError("ContivCIDR", str(block),
                          f"needs at least 18 host bits (/{block.max_prefixlen - 18} or larger)")

    def part(host_bits: int, index: int) -> IPNetwork:
        # the index-th subnet with `host_bits` host bits inside the block
        start = int(block.network_address) + index * (1 << host_bits)
        return ipaddress.ip_network((start, block.max_prefixlen - host_bits))

    pods, hosts = part(16, 0), part(16, 1)

    interconnect = cfg.node_interconnect_cidr
    if not interconnect_given and not cfg.node_interconnect_dhcp:
        interconnect = part(9, 256)
    return replace(cfg, pod_subnet_cidr=pods, pod_network_prefix_len=block.max_prefixlen - 7,
                   vpp_host_subnet_cidr=hosts,
                   vpp_host_network_prefix_len=block.max_prefixlen - 7,
                   node_interconnect_cidr=interconnect, vxlan_cidr=part(9, 257))


assert {f.name for f in fields(IPAMConfig)} == set(_KEYS.values())

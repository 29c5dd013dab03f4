"""A node's subnets and addresses, derived from the cluster config and its node ID (Contiv's rules).

- The per-node pod and VPP-host subnets are the node-ID-th subnets of the cluster-wide ones; the
  ID equal to the number of such subnets takes subnet 0 (Contiv: ID 1 is the first node, and the
  all-zero subnet is used last), so the valid IDs are 1 .. 2**(per-node len - cluster len).
- The pod gateway is the first host of the node's pod subnet; the VPP end of the VPP-host
  interconnect is its first host, the Linux end its second.
- The node-interconnect and VXLAN addresses are host number `node_id` of their subnets. Unlike
  Contiv, an ID that would land on the IPv4 broadcast address is out of range; a DefaultGateway
  inside the interconnect subnet is skipped over, as Contiv did.

`max_node_id` is the smallest bound any of these rules gives. Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ipam._parse import ConfigError, IPAddress, IPNetwork
from ipam.plan import AddressPlan

IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface

NODE_ID_LIMIT = 2**32 - 1  # node IDs are uint32 in Contiv's data model; keep that bound


@dataclass(frozen=True)
class NodeNetworks:
    """Everything address-related one node needs; interfaces carry their subnet's prefix."""

    node_id: int
    pod_subnets: tuple[IPNetwork, ...]  # one per family, primary (PodSubnetCIDR) first
    gateways: tuple[IPAddress, ...]  # first host of each pod subnet, same order
    vpp_host_subnet: IPNetwork
    vpp_host_ip: IPInterface  # VPP end of the VPP-host interconnect
    host_linux_ip: IPInterface  # Linux end of the VPP-host interconnect
    node_interconnect_ip: IPInterface | None  # None when NodeInterconnectDHCP is true
    vxlan_ip: IPInterface


def _split_count(cluster: IPNetwork, per_node_len: int) -> int:
    return 1 << (per_node_len - cluster.prefixlen)


def _host_slots(subnet: IPNetwork, skip: IPAddress | None) -> int:
    """How many node IDs fit when node N takes host number N of `subnet`."""
    slots = subnet.num_addresses - 1  # host 0 is the network address (v6: subnet-router anycast)
    if subnet.version == 4:
        slots -= 1  # broadcast
    if skip is not None and skip in subnet and skip != subnet.network_address:
        slots -= 1
    return max(slots, 0)


def node_id_bounds(cfg: AddressPlan) -> list[tuple[int, str]]:
    """(bound, key that causes it) for every rule limiting the node ID."""
    bounds = [(_split_count(net, plen), key) for key, net, plen in cfg.pod_subnets()]
    bounds.append((_split_count(cfg.vpp_host_subnet_cidr, cfg.vpp_host_network_prefix_len),
                   "VPPHostSubnetCIDR"))
    if not cfg.node_interconnect_dhcp and cfg.node_interconnect_cidr is not None:
        bounds.append((_host_slots(cfg.node_interconnect_cidr, cfg.default_gateway),
                       "NodeInterconnectCIDR"))
    bounds.append((_host_slots(cfg.vxlan_cidr, None), "VxlanCIDR"))
    bounds.append((NODE_ID_LIMIT, "node ID (uint32)"))
    return bounds


def max_node_id(cfg: AddressPlan) -> int:
    """The largest valid node ID (IDs start at 1)."""
    return min(bound for bound, _ in node_id_bounds(cfg))


def _node_subnet(cluster: IPNetwork, per_node_len: int, node_id: int) -> IPNetwork:
    index = node_id % _split_count(cluster, per_node_len)  # ID == count wraps to subnet 0
    size = 1 << (cluster.max_prefixlen - per_node_len)
    start = int(cluster.network_address) + index * size
    return ipaddress.ip_network((start, per_node_len))


def _host(subnet: IPNetwork, number: int) -> IPInterface:
    address = int(subnet.network_address) + number
    return ipaddress.ip_interface((address, subnet.prefixlen))


def _interconnect_ip(cfg: AddressPlan, node_id: int) -> IPInterface | None:
    subnet = cfg.node_interconnect_cidr
    if cfg.node_interconnect_dhcp or subnet is None:
        return None
    number = node_id
    gateway = cfg.default_gateway
    # Contiv skips the gateway: IDs at or above its host number move up by one
    if gateway is not None and gateway in subnet \
            and int(gateway) - int(subnet.network_address) <= number:
        number += 1
    return _host(subnet, number)


def check_node_id(cfg: AddressPlan, node_id: int) -> None:
    """Raises ConfigError naming the bound (and the key that sets it) for an invalid ID."""
    bound, key = min(node_id_bounds(cfg))
    if isinstance(node_id, bool) or not isinstance(node_id, int) or not 1 <= node_id <= bound:
        raise ConfigError("node ID", node_id, f"must be between 1 and {bound} (the bound "
                          f"{key} allows); enlarge that subnet for more nodes")


def node_networks(cfg: AddressPlan, node_id: int) -> NodeNetworks:
    """The subnets and addresses of node `node_id` (1-based)."""
    check_node_id(cfg, node_id)
    pods = tuple(_node_subnet(net, plen, node_id) for _, net, plen in cfg.pod_subnets())
    host_subnet = _node_subnet(cfg.vpp_host_subnet_cidr, cfg.vpp_host_network_prefix_len,
                               node_id)
    vxlan = _host(cfg.vxlan_cidr, node_id)
    return NodeNetworks(
        node_id=node_id,
        pod_subnets=pods,
        gateways=tuple(_host(p, 1).ip for p in pods),
        vpp_host_subnet=host_subnet,
        vpp_host_ip=_host(host_subnet, 1),
        host_linux_ip=_host(host_subnet, 2),
        node_interconnect_ip=_interconnect_ip(cfg, node_id),
        vxlan_ip=vxlan,
    )

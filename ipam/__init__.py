"""Pure IPAM: the cluster address plan, node subnets from node IDs, and per-node pod allocation.

No I/O here (no sockets, no files): persistence is agent/state/store's job. The public API:

    IPAMConfig.from_mapping(m) -> (IPAMConfig, warnings)   the `IPAMConfig:` YAML section
    max_node_id(cfg) -> int                                 largest valid node ID (IDs start at 1)
    node_networks(cfg, node_id) -> NodeNetworks             a node's subnets and addresses
    PodAllocator(subnet, gateway)                           round-robin pod addresses
    NodeAllocator(networks)                                 one address per family, all or none
    ConfigError (CNI code 7), Exhausted (CNI code 100)
"""

from ipam._parse import ConfigError, Exhausted, IPAddress, IPNetwork
from ipam.allocator import NodeAllocator, PodAllocator
from ipam.config import IPAMConfig
from ipam.subnets import IPInterface, NodeNetworks, check_node_id, max_node_id, node_networks

__all__ = [
    "ConfigError",
    "Exhausted",
    "IPAMConfig",
    "IPAddress",
    "IPInterface",
    "IPNetwork",
    "NodeAllocator",
    "NodeNetworks",
    "PodAllocator",
    "check_node_id",
    "max_node_id",
    "node_networks",
]

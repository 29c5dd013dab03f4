"""NodeInfo: one node's entry in the registry, and how this node computes its own.

The node IP (the address other nodes reach this node on) comes from the `NodeIP` config key,
else the `NODE_IP` environment variable (the DaemonSet sets it from `status.hostIP`), else host
number `node_id` of `NodeInterconnectCIDR`, as Contiv computed it. The VXLAN address is host
number `node_id` of `VxlanCIDR`; the VXLAN MAC is derived from the node ID, so every node knows
every other node's MAC without asking it. Pure: no I/O.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ipam import NodeNetworks

VXLAN_OVERHEAD = {4: 50, 6: 70}  # outer Ethernet 14 + IP 20/40 + UDP 8 + VXLAN 8
# outer IP 20/40 + UDP 8 + WireGuard's data header 16 (type, receiver, counter) + its tag 16
WIREGUARD_OVERHEAD = {4: 60, 6: 80}


class NodeInfoError(ValueError):
    """A registry entry or node IP that cannot be used; the message says which and why."""


class NoNodeIP(NodeInfoError):
    """Neither NodeIP nor NODE_IP is set and NodeInterconnectDHCP assigns none."""


@dataclass(frozen=True)
class NodeInfo:
    """What one node publishes about itself."""

    name: str
    node_id: int
    node_ip: str  # bare address, no prefix length
    vxlan_ip: str  # bare address: this node's end of the VXLAN overlay
    pod_subnets: tuple[str, ...]  # one per family, primary first
    vpp_host_subnet: str
    uplink_mac: str = ""  # the MAC behind node_ip (the L2 interconnect routes through it)
    rest_port: int = 0  # the agent's REST port on node_ip (vswitchctl); 0: not published
    # Encryption: wireguard: its public key and UDP port ("" and 0: it does not encrypt)
    wg_public_key: str = ""
    wg_port: int = 0

    @property
    def vxlan_mac(self) -> str:
        return vxlan_mac(self.node_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "id": self.node_id,
            "nodeIP": self.node_ip,
            "vxlanIP": self.vxlan_ip,
            "vxlanMAC": self.vxlan_mac,
            "podSubnets": list(self.pod_subnets),
            "vppHostSubnet": self.vpp_host_subnet,
            "uplinkMAC": self.uplink_mac,
            "restPort": self.rest_port,
            **({"wireguard": {"publicKey": self.wg_public_key, "port": self.wg_port}}
               if self.wg_public_key else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodeInfo:
        """Parses and validates a registry value; raises NodeInfoError naming the field."""
        try:
            wireguard = data.get("wireguard") or {}
            info = cls(
                name=str(data["name"]),
                node_id=int(data["id"]),
                node_ip=str(ipaddress.ip_address(data["nodeIP"])),
                vxlan_ip=str(ipaddress.ip_address(data["vxlanIP"])),
                pod_subnets=tuple(str(ipaddress.ip_network(s)) for s in data["podSubnets"]),
                vpp_host_subnet=str(ipaddress.ip_network(data["vppHostSubnet"])),
                uplink_mac=str(data.get("uplinkMAC", "")),
                rest_port=int(data.get("restPort", 0)),  # absent in older agents' entries
                wg_public_key=_wireguard_key(wireguard.get("publicKey", "")),
                wg_port=int(wireguard.get("port", 0)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise NodeInfoError(f"bad registry entry {dict(data)!r}: {exc}") from exc
        if info.wg_public_key and not 0 < info.wg_port < 65536:
            raise NodeInfoError(f"bad registry entry {dict(data)!r}: wireguard.port "
                                f"{info.wg_port} is no UDP port")
        if info.node_id < 1 or not info.name:
            raise NodeInfoError(f"bad registry entry {dict(data)!r}: empty name or ID < 1")
        return info


def _wireguard_key(value: object) -> str:
    """A published WireGuard public key: base64 of 32 bytes."""
    key = str(value)
    if key and len(base64.b64decode(key, validate=True)) != 32:
        raise ValueError(f"wireguard.publicKey {key!r} is not a WireGuard key")
    return key


def fingerprint(public: str) -> str:
    """A short, stable name for a public key (the first 8 bytes of its SHA-256, hex)."""
    if not public:
        return ""
    digest = hashlib.sha256(base64.b64decode(public)).hexdigest()[:16]
    return ":".join(digest[i:i + 4] for i in range(0, 16, 4))


def vxlan_mac(node_id: int) -> str:
    """The MAC of node `node_id`'s VXLAN end: locally administered, unicast, ID in the low bytes."""
    raw = bytes([0x12, 0x2B]) + (node_id & 0xFFFFFFFF).to_bytes(4, "big")
    return ":".join(f"{b:02x}" for b in raw)


def link_local(node_id: int) -> str:
    """A link-local next hop standing for node `node_id` in IPv6 routes.

    An IPv6 route cannot have an IPv4 next hop (the kernel refuses RTA_VIA for IPv6), so the
    IPv6 routes to a remote node's pods go via this address, which a permanent neighbor entry
    resolves to the remote node's MAC. No interface needs to hold the address."""
    return str(ipaddress.IPv6Address((0xFE80 << 112) | (0x2B << 32) | (node_id & 0xFFFFFFFF)))


def choose_node_ip(configured: str, env: Mapping[str, str], networks: NodeNetworks) -> str:
    """NodeIP from the config, else NODE_IP, else NodeInterconnectCIDR host N (Contiv)."""
    for source, value in (("NodeIP", configured), ("NODE_IP", env.get("NODE_IP", ""))):
        if value:
            try:
                return str(ipaddress.ip_interface(value.strip()).ip)
            except ValueError as exc:
                raise NodeInfoError(f"{source} {value!r} is not an IP address") from exc
    if networks.node_interconnect_ip is None:
        raise NoNodeIP("no node IP: set NodeIP or NODE_IP (NodeInterconnectDHCP assigns none)")
    return str(networks.node_interconnect_ip.ip)


def local_node(
    name: str, node_ip: str, networks: NodeNetworks, uplink_mac: str = "", rest_port: int = 0,
    wg_public_key: str = "", wg_port: int = 0,
) -> NodeInfo:
    return NodeInfo(
        name=name,
        node_id=networks.node_id,
        node_ip=node_ip,
        vxlan_ip=str(networks.vxlan_ip.ip),
        pod_subnets=tuple(str(s) for s in networks.pod_subnets),
        vpp_host_subnet=str(networks.vpp_host_subnet),
        uplink_mac=uplink_mac,
        rest_port=rest_port,
        wg_public_key=wg_public_key,
        wg_port=wg_port if wg_public_key else 0,
    )

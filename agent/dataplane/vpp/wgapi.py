"""VPP's wireguard plugin through its API (VPP 26.06, plugins/wireguard/wireguard.api): the
interfaces and peers as the mesh (wireguard.py) uses them. Keys are base64 text, as the
registry publishes them, except the private key, which VPP takes as its 32 bytes and which no
answer here carries (the interfaces are dumped without it)."""

from __future__ import annotations

import base64
import ipaddress
from dataclasses import dataclass

from agent.dataplane.vpp.api import VppApi

ANY = 0xFFFFFFFF
ESTABLISHED = 0x2  # wireguard_peer_flags


@dataclass(frozen=True)
class HeldPeer:
    """A peer as VPP holds it."""

    index: int
    public_key: str
    endpoint: str
    port: int
    keepalive: int
    table_id: int
    allowed_ips: tuple[str, ...]  # sorted
    established: bool


def _text(key: bytes) -> str:
    return base64.b64encode(bytes(key)).decode()


def interfaces(api: VppApi) -> dict[int, tuple[str, int, str]]:
    """Every wireguard interface: sw_if_index -> (public key, port, source address)."""
    out = {}
    for d in api.dump("wireguard_interface_dump", show_private_key=False, sw_if_index=ANY):
        itf = d.interface
        out[int(itf.sw_if_index)] = (_text(itf.public_key), int(itf.port), str(itf.src_ip))
    return out


def create(api: VppApi, private: bytes, port: int, src: str) -> int:
    reply = api.call(
        "wireguard_interface_create", generate_key=False,
        interface={"user_instance": ANY, "sw_if_index": ANY, "private_key": private,
                   "public_key": bytes(32), "port": port, "src_ip": ipaddress.ip_address(src)},
        context=f"the WireGuard interface (port {port})",
    )
    return int(reply.sw_if_index)


def delete(api: VppApi, sw_if_index: int) -> None:
    """The interface and its peers (VPP deletes them with it); gone already is fine."""
    api.call_present("wireguard_interface_delete", sw_if_index=sw_if_index,
                     context="the old WireGuard interface")


def add_peer(api: VppApi, peer: HeldPeer, sw_if_index: int, what: str) -> None:
    prefixes = [ipaddress.ip_network(p) for p in peer.allowed_ips]
    api.call(
        "wireguard_peer_add",
        peer={"peer_index": ANY, "public_key": base64.b64decode(peer.public_key),
              "port": peer.port, "persistent_keepalive": peer.keepalive,
              "table_id": peer.table_id, "endpoint": ipaddress.ip_address(peer.endpoint),
              "sw_if_index": sw_if_index, "flags": 0, "n_allowed_ips": len(prefixes),
              "allowed_ips": prefixes},
        context=what,
    )


def remove_peer(api: VppApi, peer: HeldPeer) -> bool:
    """False: it was gone already."""
    return api.call_present("wireguard_peer_remove", peer_index=peer.index) is not None


def peers(api: VppApi, sw_if_index: int | None) -> dict[str, HeldPeer]:
    """The peers of interface `sw_if_index` (None: of all), by public key."""
    out = {}
    for d in api.dump("wireguard_peers_dump", peer_index=ANY):
        p = d.peer
        if sw_if_index is not None and int(p.sw_if_index) != sw_if_index:
            continue
        key = _text(p.public_key)
        out[key] = HeldPeer(
            int(p.peer_index), key, str(p.endpoint), int(p.port), int(p.persistent_keepalive),
            int(p.table_id), tuple(sorted(str(a) for a in p.allowed_ips[:int(p.n_allowed_ips)])),
            bool(int(p.flags) & ESTABLISHED))
    return out


__all__ = ["ANY", "HeldPeer", "add_peer", "create", "delete", "interfaces", "peers",
           "remove_peer"]

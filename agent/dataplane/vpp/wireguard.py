"""VPP's own WireGuard: the node mesh with `Dataplane: vpp`, `VXLANOwner: vpp` and `Encryption:
wireguard` (docs/encryption.md). VPP encrypts the pods' traffic to other nodes itself, in the
`wireguard` plugin, instead of handing it to the node's Linux.

Node-wide (made once per VPP connection and key, found again by its tag):

    interface  a wireguard interface tagged `WG_TAG`: this node's private key (its key file),
               listen port `WireGuardPort`, source VPP's end of the VPP-host interconnect (host 1
               of vppHostSubnet, as the VXLAN tunnels'); in the pod VRF in both families,
               unnumbered to the pods' gateway loopback, IPv6 on, GSO (a pod's TCP arrives in
               GSO packets, and the plugin would encrypt a whole buffer chain as one packet),
               MTU the pod MTU, up

Per remote node:

    peer       its public key; endpoint its VPP's interconnect address and its port, looked up
               in the main VRF (VPP's default route there leads to the node, whose Linux routes
               the remote VPP-host subnet via the remote node IP: node_mesh.py); allowed IPs its
               pod subnets, VPP-host subnet, VXLAN address/32 and fe80::2b:0:<ID>/128 (what it
               may send from, and what the routes' next hops are in); a 25-s keepalive on the
               side of the lower node ID
    routes     pod VRF: its pod subnets and VPP-host subnet via the interface, next hop its
               VXLAN address (IPv6: fe80::2b:0:<ID>): the plugin sends a route's packets to the
               peer whose allowed IPs hold the route's next hop; main VRF: its pod subnets via
               the pod VRF (what the node itself sends them: Linux routes the cluster's pod
               ranges into VPP, and Linux's mesh routes only the VPP-host subnets)

What no peer's route covers dies in VPP: the cluster's pod ranges are dropped in both VRFs
(base.py, `route_cluster`) and Linux routes them into VPP, so a packet to a node without a peer
yet, or without a key, never leaves in clear. The outer packets (UDP between the VPPs'
interconnect addresses) are all that crosses the fabric.

The key: the node's key file (agent/linux/wireguard.KeyFile, StateDir, mode 0600). VPP takes
the private key in the create request over the node's own API socket; it goes nowhere else (the
interface is dumped without it). VPP cannot change an interface's key: after a rotation the
interface is made again with the new key and every peer and route set again.

Status: VPP tells per peer only whether a session is established (no handshake time and no
bytes per peer); the view says that much and no more.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import Any

from agent.dataplane.kernel_mesh import host_prefix
from agent.dataplane.vpp import interfaces, ip, wgapi
from agent.dataplane.vpp.api import VppApi
from agent.dataplane.vpp.mesh import routes_to, settle_in_pod_vrf, tunnel_endpoint
from agent.dataplane.vpp.names import BASE_TAG_PREFIX, GATEWAY_TAG
from agent.dataplane.vpp.wgapi import ANY, HeldPeer
from agent.linux.wireguard import KEEPALIVE, KeyFile
from agent.model.errors import DataplaneFailure, InvalidConfig, TryAgainLater
from agent.model.node import WIREGUARD_OVERHEAD, NodeInfo, fingerprint, link_local

log = logging.getLogger(__name__)

WG_TAG = BASE_TAG_PREFIX + "mesh-wireguard"
PLUGIN_HINT = ("enable VPP's wireguard plugin (plugins { plugin wireguard_plugin.so { enable } } "
               "in its startup config), or set VXLANOwner: linux (the node's WireGuard)")


class VppWireGuard:
    """The VPP half of `VppNodeMesh` (node_mesh.py) with encryption (see the module docstring)."""

    def __init__(self, api: VppApi, key: KeyFile, port: int, pod_vrf_id: int,
                 main_vrf_id: int, pod_mtu: int = 1420,
                 on_interface: Callable[[int], None] | None = None) -> None:
        """`on_interface`: as VppMesh's, with the wireguard interface's sw_if_index."""
        self.api = api
        self.on_interface = on_interface
        self.pod_mtu = pod_mtu
        self.key = key
        self.port = port
        self.pod_vrf_id = pod_vrf_id
        self.main_vrf_id = main_vrf_id
        self._lock = threading.RLock()
        self._itf: tuple[int, int, tuple[int, int]] | None = None  # (generation, index, key)
        self._known: dict[int, NodeInfo] = {}  # node ID -> the entry its peer was set from
        self.last_status: tuple[float, list[HeldPeer] | None] = (0.0, None)

    def generation(self) -> int:
        """Changes when VPP was (re)connected: a restarted VPP has lost the mesh."""
        return int(self.api.generation)

    def overhead(self, local: NodeInfo) -> int:
        """WireGuard's bytes over a pod's packet; the outer family is the VPP-host subnet's."""
        return WIREGUARD_OVERHEAD[ipaddress.ip_network(local.vpp_host_subnet).version]

    def describe(self, local: NodeInfo) -> str:
        return f"VPP's WireGuard ({self.overhead(local)} bytes)"

    # ---- node-wide --------------------------------------------------------------------------

    def prepare(self, local: NodeInfo) -> None:
        """At the agent's start: a VPP without the wireguard plugin refuses the start (pods
        would have no way to other nodes but clear text). A VPP not up yet, or without the
        driver's base yet, is no refusal: the interface is made when the mesh programs the
        first node."""
        try:
            has = self.api.has("wireguard_interface_create")
            if has:
                self.interface(local)
        except TryAgainLater as exc:
            log.info("VPP's WireGuard interface comes with the mesh: %s", exc)
            return
        if not has:
            raise InvalidConfig("Encryption: wireguard with VXLANOwner: vpp needs VPP's "
                                "wireguard plugin, and the running VPP has none", PLUGIN_HINT)

    def interface(self, local: NodeInfo) -> int:
        """The wireguard interface's sw_if_index: made (or made again, after a rotation or with
        other settings) and settled once per VPP connection and key."""
        with self._lock:
            self.api.connect()
            stamp = self.key.stamp()
            if (self._itf is not None and self._itf[0] == self.api.generation
                    and self._itf[2] == stamp):
                return self._itf[1]
            if not self.api.has("wireguard_interface_create"):
                raise DataplaneFailure("the running VPP has no wireguard plugin", PLUGIN_HINT)
            public, src = self.key.public(), tunnel_endpoint(local)
            index = None
            for sw_if_index, held in self._held_interfaces().items():
                if index is None and held == (public, self.port, src):
                    index = sw_if_index
                    continue
                self._delete_interface(sw_if_index)
            if index is None:
                index = self._create(src)
            self._settle(index, local)
            if self.on_interface is not None:
                self.on_interface(index)
            self._itf = (self.api.generation, index, stamp)
            return index

    def _held_interfaces(self) -> dict[int, tuple[str, int, str]]:
        """Our wireguard interfaces (tagged), and any holding our port (one whose making was
        cut short before its tag; an operator's own on WireGuardPort would go with them)."""
        tagged = {i.sw_if_index for i in interfaces.by_tag(self.api, WG_TAG)}
        return {index: held for index, held in wgapi.interfaces(self.api).items()
                if index in tagged or held[1] == self.port}

    def _create(self, src: str) -> int:
        index = wgapi.create(self.api, self.key.private_bytes(), self.port, src)
        interfaces.set_tag(self.api, index, WG_TAG)
        log.info("VPP's WireGuard interface made: port %d, public key fingerprint %s", self.port,
                 fingerprint(self.key.public()))
        return index

    def _delete_interface(self, sw_if_index: int) -> None:
        """The interface, its peers and our routes through it."""
        for ipv6 in (False, True):
            for prefix, route in ip.routes(self.api, self.pod_vrf_id, ipv6).items():
                if sw_if_index in route.sw_if_indexes:
                    ip.delete_route(self.api, self.pod_vrf_id, prefix)
        wgapi.delete(self.api, sw_if_index)

    def _settle(self, index: int, local: NodeInfo) -> None:
        """In the pod VRF, unnumbered to the pods' gateway loopback (an address of its own
        would collide with the VXLAN mesh's BVI, which holds the node's VXLAN address while
        both meshes run: wireguard-permissive, or a switch from the clear mesh), up; GSO: a
        pod's TCP may arrive in GSO packets, and the plugin would encrypt a whole buffer chain
        as one packet."""
        gateway = interfaces.by_tag(self.api, GATEWAY_TAG)
        if not gateway:
            raise TryAgainLater("VPP's pod gateway is not made yet (the driver makes it)")
        settle_in_pod_vrf(self.api, index, self.pod_vrf_id, gateway[0].sw_if_index,
                          "the WireGuard interface")
        # A packet above the pod MTU (a pod made with a larger one) is refused here with ICMP
        # "too big", which TCP follows, instead of leaving as an outer packet the
        # interconnect's MTU cannot carry.
        interfaces.set_mtu(self.api, index, self.pod_mtu)

    def remove(self, local: NodeInfo) -> list[str]:
        """The interface, its peers and routes gone (a node whose mesh is clear now)."""
        with self._lock:
            self.api.connect()
            if not self.api.has("wireguard_interface_dump"):
                return []
            tagged = {i.sw_if_index for i in interfaces.by_tag(self.api, WG_TAG)}
            removed = []
            for sw_if_index in tagged:
                self._delete_interface(sw_if_index)
                removed.append(f"WireGuard interface {sw_if_index}")
            if tagged:
                removed += self._prune_main(local, set())
            self._itf = None
            return removed

    # ---- per remote node --------------------------------------------------------------------

    def program(self, local: NodeInfo, remote: NodeInfo) -> None:
        with self._lock:
            index = self.interface(local)
            if not remote.wg_public_key:
                raise DataplaneFailure(
                    f"node {remote.name} publishes no WireGuard key (its agent runs without "
                    "Encryption: wireguard): its pods stay unreachable from here, never in clear")
            held = self.peers()
            old = self._known.get(remote.node_id)
            if old is not None and old.wg_public_key != remote.wg_public_key:
                self._remove_peer(held.get(old.wg_public_key))
            want = self._wanted(local, remote)
            have = held.get(remote.wg_public_key)
            if have is None or _settings(have) != _settings(want):
                self._remove_peer(have)
                self._add_peer(want, index, remote)
            self._known[remote.node_id] = remote
            for subnet, hop in routes_to(remote):
                ip.add_route(self.api, self.pod_vrf_id, subnet,
                             ip.via_neighbor(subnet, index, ipaddress.ip_address(hop)))
            self.cross(remote)

    def cross(self, remote: NodeInfo) -> None:
        """Main-VRF routes of `remote`'s pod subnets into the pod VRF: what the node itself
        sends them (Linux routes the cluster's pod ranges into VPP)."""
        for subnet in _pod_subnets(remote):
            ip.add_route(self.api, self.main_vrf_id, subnet, ip.via_table(subnet, self.pod_vrf_id))

    def _wanted(self, local: NodeInfo, remote: NodeInfo) -> HeldPeer:
        return HeldPeer(
            ANY, remote.wg_public_key, tunnel_endpoint(remote), remote.wg_port,
            KEEPALIVE if local.node_id < remote.node_id else 0, self.main_vrf_id,
            tuple(sorted(allowed_ips(remote))), False)

    def _add_peer(self, peer: HeldPeer, index: int, remote: NodeInfo) -> None:
        wgapi.add_peer(self.api, peer, index, f"the WireGuard peer of node {remote.name}")

    def _remove_peer(self, peer: HeldPeer | None) -> bool:
        return peer is not None and wgapi.remove_peer(self.api, peer)

    def peers(self) -> dict[str, HeldPeer]:
        """The peers of our interface, by public key."""
        return wgapi.peers(self.api, self._itf[1] if self._itf is not None else None)

    def unprogram(self, local: NodeInfo, remote: NodeInfo,
                  keep: Collection[NodeInfo] = ()) -> list[str]:
        with self._lock:
            self.api.connect()
            made = self._itf is not None and self._itf[0] == self.api.generation
            if not made and not (self.api.has("wireguard_interface_dump")
                                 and interfaces.by_tag(self.api, WG_TAG)):
                return []  # nothing made on this VPP
            index = self.interface(local)
            removed: list[str] = []
            keys = {n.wg_public_key for n in keep}
            gone = remote.wg_public_key and remote.wg_public_key not in keys
            if gone and self._remove_peer(self.peers().get(remote.wg_public_key)):
                removed.append(f"peer {fingerprint(remote.wg_public_key)}")
            if self._known.get(remote.node_id) == remote:
                del self._known[remote.node_id]
            needed = {str(s) for n in keep for s, _ in routes_to(n)}
            for subnet, _ in routes_to(remote):
                found = ip.route(self.api, self.pod_vrf_id, subnet)
                if str(subnet) in needed or found is None or not found.through(index):
                    continue
                ip.delete_route(self.api, self.pod_vrf_id, subnet)
                removed.append(f"route {subnet}")
            for subnet in _pod_subnets(remote):
                found = ip.route(self.api, self.main_vrf_id, subnet)
                if str(subnet) not in needed and found is not None and self._crossing(found):
                    ip.delete_route(self.api, self.main_vrf_id, subnet)
                    removed.append(f"route {subnet} in table {self.main_vrf_id}")
            return removed

    def _crossing(self, route: ip.VppRoute) -> bool:
        """Whether `route` (of the main VRF) only looks its packets up in the pod VRF."""
        return route.via_tables == (self.pod_vrf_id,) and route.sw_if_indexes == (ANY,) and (
            route.types == (ip.PATH_NORMAL,))

    def _prune_main(self, local: NodeInfo, wanted: set[str]) -> list[str]:
        """The main VRF's routes into the pod VRF that neither this node's own pod subnets
        (base.py) nor a remote node in `wanted` explain."""
        mine = {str(ipaddress.ip_network(s)) for s in local.pod_subnets}
        removed = []
        for ipv6 in (False, True):
            for prefix, route in ip.routes(self.api, self.main_vrf_id, ipv6).items():
                if str(prefix) in mine | wanted or not self._crossing(route):
                    continue
                ip.delete_route(self.api, self.main_vrf_id, prefix)
                removed.append(f"route {prefix} in table {self.main_vrf_id}")
        return removed

    def prune(self, local: NodeInfo, keep: Collection[NodeInfo],
              crossed: Collection[NodeInfo] = ()) -> list[str]:
        """Removes the peers and routes no node in `keep` explains (nor, for the main VRF's
        routes into the pod VRF, one in `crossed`: VppPermissive's clear nodes); returns what
        it removed (`missing` says which nodes to program again)."""
        with self._lock:
            index = self.interface(local)
            removed: list[str] = []
            keys = {n.wg_public_key for n in keep if n.wg_public_key}
            for key, peer in self.peers().items():
                if key not in keys:
                    self._remove_peer(peer)
                    removed.append(f"peer {fingerprint(key)}")
            self._known = {n.node_id: n for n in keep if n.node_id in self._known}
            wanted = {str(s) for n in keep if n.wg_public_key for s, _ in routes_to(n)}
            removed += self._prune_main(local, {
                str(s) for n in [*keep, *crossed] if n.wg_public_key or n in crossed
                for s in _pod_subnets(n)})
            for ipv6 in (False, True):
                for prefix, route in ip.routes(self.api, self.pod_vrf_id, ipv6).items():
                    if index in route.sw_if_indexes and str(prefix) not in wanted:
                        ip.delete_route(self.api, self.pod_vrf_id, prefix)
                        removed.append(f"route {prefix}")
            return removed

    def missing(self, local: NodeInfo, keep: Collection[NodeInfo]) -> list[NodeInfo]:
        """The nodes of `keep` whose peer VPP does not hold as wanted (a restarted VPP)."""
        with self._lock:
            self.interface(local)  # made, so that `peers` reads its own
            held = self.peers()
            return [n for n in keep if n.wg_public_key and (
                n.wg_public_key not in held
                or _settings(held[n.wg_public_key]) != _settings(self._wanted(local, n)))]

    # ---- the key and the views --------------------------------------------------------------

    def refresh_local(self, local: NodeInfo) -> NodeInfo | None:
        """The controller's tick (every 2 s): the peers read for the views; after a rotation
        (a new key file) the interface made again with the new key and every peer and route
        set again; then the node's entry with the new public key is returned for publishing.
        None: the key did not change."""
        with self._lock:
            if self._itf is not None:
                try:
                    self.last_status = (time.time(), list(self.peers().values()))
                except DataplaneFailure as exc:
                    log.warning("VPP's WireGuard peers: %s", exc)
            if self._itf is None or self.key.stamp() == self._itf[2]:
                return None
            public = self.key.public()
            self.interface(local)
            for remote in list(self._known.values()):
                self.program(local, remote)
            log.info("WireGuard key rotated in VPP: public key fingerprint %s (was %s)",
                     fingerprint(public), fingerprint(local.wg_public_key))
            return replace(local, wg_public_key=public)

    def view(self, local: NodeInfo, remotes: Collection[NodeInfo]) -> dict[str, Any]:
        """The peers as last read (each tick, never per request), each named by the node whose
        key it has: for REST's /v1/nodes, vswitchctl and the metrics. VPP gives no handshake
        time nor bytes per peer: those are None."""
        at, peers = self.last_status
        names = {n.wg_public_key: n.name for n in remotes if n.wg_public_key}
        return {
            "interface": "VPP wireguard interface",
            "implementation": "vpp",
            "publicKey": local.wg_public_key,
            "fingerprint": fingerprint(local.wg_public_key),
            "listenPort": self.port,
            "readAt": at,
            "peers": [{
                "node": names.get(p.public_key, ""),
                "publicKey": p.public_key,
                "fingerprint": fingerprint(p.public_key),
                "endpoint": f"{p.endpoint}:{p.port}",
                "allowedIPs": list(p.allowed_ips),
                "established": p.established,
                "latestHandshake": None,
                "rxBytes": None,
                "txBytes": None,
            } for p in peers or []],
        }


def _settings(peer: HeldPeer) -> tuple[Any, ...]:
    return (peer.endpoint, peer.port, peer.keepalive, peer.table_id, peer.allowed_ips)


def _pod_subnets(remote: NodeInfo) -> list[ip.IPNetwork]:
    return [ipaddress.ip_network(s) for s in remote.pod_subnets]


def allowed_ips(remote: NodeInfo) -> list[str]:
    """What a remote node's peer may send from, and where its routes' next hops are."""
    return [*(str(ipaddress.ip_network(s)) for s in remote.pod_subnets),
            str(ipaddress.ip_network(remote.vpp_host_subnet)), host_prefix(remote.vxlan_ip),
            f"{link_local(remote.node_id)}/128"]


__all__ = ["WG_TAG", "HeldPeer", "VppWireGuard", "allowed_ips"]

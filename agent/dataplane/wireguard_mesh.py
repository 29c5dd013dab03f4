"""The kernel dataplane's node mesh with `Encryption: wireguard`: every node pair a WireGuard peer.

One WireGuard device per node (agent/linux/wireguard: the kernel's, or wireguard-go), holding the
node's VXLAN address as a /32 (the overlay address a node's own connections to remote pods leave
with, as with VXLAN), MTU the uplink's minus WireGuard's overhead. Per remote node:

    peer      its public key, endpoint <node IP>:<its port>, allowed IPs its pod subnets and its
              VXLAN address/32 (WireGuard drops what arrives from any other source)
    routes    the same prefixes on the device, protocol `RTPROT_MESH`

and node-wide, the cluster's pod CIDRs and VxlanCIDR on the device too (`catch_all`): a packet to
a node not programmed yet, or one publishing no key, goes into the device and is dropped there
(no peer), never out of the uplink in clear by the default route.

Peers are named by key, so a remote node's new key (a rotation) is a new peer: the old one is
removed as the new one is set. `prune` makes the kernel and the device hold exactly what the
nodes in `keep` need; it also removes the VXLAN device of a node that ran without encryption.
`refresh_local` notices a new key file (`vswitch-agent wireguard rotate`) and puts the key on
the device; the controller then publishes the new public key.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any

from agent.dataplane.kernel_mesh import (
    RTPROT_MESH,
    KernelMesh,
    Uplink,
    check_fits,
    find_uplink,
    host_prefix,
)
from agent.linux import netlink
from agent.linux.iproute import Session
from agent.linux.nlcodec import RT_SCOPE_LINK
from agent.linux.wireguard import Device, DeviceStatus, KeyFile
from agent.model.errors import DataplaneFailure
from agent.model.node import WIREGUARD_OVERHEAD, NodeInfo, fingerprint

log = logging.getLogger(__name__)
SESSION_SECONDS = 180  # a session with no handshake for this long is gone (WireGuard's rekey)


class WireGuardMesh:
    """`MeshDataplane` with WireGuard: peers and routes on one device."""

    def __init__(self, pod_mtu: int, device: Device, catch_all: Sequence[str],
                 stale_links: tuple[str, ...] = ()) -> None:
        self.pod_mtu = pod_mtu
        self.device = device
        self.catch_all = tuple(str(ipaddress.ip_network(c)) for c in catch_all)
        self.stale_links = stale_links  # the VXLAN device of the unencrypted mesh
        self._lock = threading.Lock()
        self._index: int | None = None
        self._peers: dict[int, str] = {}  # node ID -> the key its peer was set with
        self._known: dict[int, NodeInfo] = {}  # node ID -> the entry its peer was set from
        # peers this node starts handshakes with (lower node ID) that have had none since they
        # were set: node ID -> (its entry, when set, Unix time); watched by `_watch`
        self._waiting: dict[int, tuple[NodeInfo, float]] = {}
        self._watcher: threading.Thread | None = None
        self._stamp: tuple[int, int] | None = None  # the key file the device holds
        self.last_status: tuple[float, DeviceStatus | None] = (0.0, None)

    # ---- node-wide --------------------------------------------------------------------------

    @property
    def key(self) -> KeyFile:
        return self.device.key

    def uplink(self, local: NodeInfo) -> Uplink | None:
        return find_uplink(local)

    def overhead(self, local: NodeInfo) -> int:
        return WIREGUARD_OVERHEAD[ipaddress.ip_address(local.node_ip).version]

    def check_mtu(self, local: NodeInfo) -> None:
        overhead = self.overhead(local)
        check_fits(self.pod_mtu, local, overhead, f"WireGuard ({overhead} bytes)")

    def _ready(self, local: NodeInfo) -> int:
        """The device's index: made, keyed, addressed and routed once, then remembered (any
        failure, and every prune, makes the next call check again)."""
        with self._lock:
            if self._index is not None:
                return self._index
            up = self.uplink(local)
            if up is None:
                raise DataplaneFailure(f"node IP {local.node_ip} is on no interface of this node")
            stamp = self.device.key.stamp()
            index = self.device.ensure(up.mtu - self.overhead(local))
            with netlink.host_session() as links, netlink.translated("addressing the WireGuard "
                                                                      "device"):
                links.add_address(index, ipaddress.ip_interface(f"{local.vxlan_ip}/32"))
                for prefix in self.catch_all:
                    _route(links, index, prefix)
            self._stamp = stamp
            self._index = index
            return index

    def prepare(self, local: NodeInfo) -> None:
        """The device made, keyed and routed now (the agent's start: refused there when it
        cannot be)."""
        self._ready(local)

    def refresh_local(self, local: NodeInfo) -> NodeInfo | None:
        """The controller's tick (every 2 s): the device's status read for the views, and after
        a rotation (a new key file) the new key put on the device; then the node's entry with
        the new public key is returned for publishing. None: the key did not change."""
        if self._index is not None:
            try:
                self.last_status = (time.time(), self.device.status())
            except DataplaneFailure as exc:
                log.warning("WireGuard device status: %s", exc)
        if self._stamp is None or self.device.key.stamp() == self._stamp:
            return None
        stamp = self.device.key.stamp()
        public = self.device.key.public()
        self.device.configure()
        self._stamp = stamp
        # Every session ended with the old key: this node starts new handshakes with the peers
        # it initiates with (the others start theirs as they set the new key's peer).
        for node_id, key in list(self._peers.items()):
            remote = self._known.get(node_id)
            if remote is not None and remote.wg_public_key == key:
                self._set(local, remote)
        log.info("WireGuard key rotated: public key fingerprint %s (was %s)",
                 fingerprint(public), fingerprint(local.wg_public_key))
        return replace(local, wg_public_key=public)

    # ---- per remote node --------------------------------------------------------------------

    def program(self, local: NodeInfo, remote: NodeInfo) -> None:
        index = self._ready(local)
        try:
            with netlink.host_session() as links, netlink.translated("programming the "
                                                                      "WireGuard mesh"):
                for prefix in allowed_ips(remote):
                    _route(links, index, prefix)
            if not remote.wg_public_key:
                raise DataplaneFailure(
                    f"node {remote.name} publishes no WireGuard key (its agent runs without "
                    "Encryption: wireguard): its pods stay unreachable from here, never in clear")
            old = self._peers.get(remote.node_id)
            if old and old != remote.wg_public_key:
                self.device.remove_peer(old)
            self._set(local, remote)
        except BaseException:
            self._index = None
            raise

    def _set(self, local: NodeInfo, remote: NodeInfo) -> None:
        """The peer of `remote` set; the node of the lower ID starts the handshake and, when
        none follows within 0.2 s (the other side had not set this node's peer yet, or this
        node's key is new to it), starts it again until one does (`_watch`)."""
        initiate = local.node_id < remote.node_id
        self.device.set_peer(remote.wg_public_key, remote.node_ip, remote.wg_port,
                             allowed_ips(remote), initiate)
        self._peers[remote.node_id] = remote.wg_public_key
        self._known[remote.node_id] = remote
        if initiate:
            with self._lock:
                self._waiting[remote.node_id] = (remote, time.time())
                if self._watcher is None or not self._watcher.is_alive():
                    self._watcher = threading.Thread(target=self._watch, args=(local,),
                                                     name="wireguard-handshakes", daemon=True)
                    self._watcher.start()

    def _watch(self, local: NodeInfo, period: float = 0.1, again: float = 0.2,
               give_up: float = 60.0) -> None:
        """While peers wait for their first handshake: the device read every `period`, a
        peer without one `again` seconds after it was set is set again (a peer set anew starts
        a handshake at once; WireGuard alone would retry only after 5 s), and after `give_up`
        seconds WireGuard's own retries are left to it."""
        while True:
            time.sleep(period)
            with self._lock:
                if not self._waiting:
                    self._watcher = None
                    return
                waiting = dict(self._waiting)
            try:
                shaken = {p.public_key: p.latest_handshake for p in self.device.status().peers}
            except DataplaneFailure as exc:
                log.warning("WireGuard handshakes: %s", exc)
                continue
            now = time.time()
            for node_id, (remote, since) in waiting.items():
                done = shaken.get(remote.wg_public_key, 0) >= int(since)
                replaced = self._peers.get(node_id) != remote.wg_public_key
                if done or replaced or now - since > give_up:
                    with self._lock:
                        if self._waiting.get(node_id, (None, 0.0))[1] == since:
                            del self._waiting[node_id]
                elif now - since > again:
                    log.info("no WireGuard handshake with node %s %.1f s after its peer was "
                             "set: starting one again", remote.name, now - since)
                    try:
                        self.device.remove_peer(remote.wg_public_key)
                        self._set(local, remote)
                    except DataplaneFailure as exc:
                        log.warning("WireGuard peer of node %s: %s", remote.name, exc)

    def unprogram(self, local: NodeInfo, remote: NodeInfo,
                  keep: Collection[NodeInfo] = ()) -> list[str]:
        removed: list[str] = []
        with self._lock:  # not the wait of the entry that replaced this one (a new key)
            waiting = self._waiting.get(remote.node_id)
            if waiting is not None and waiting[0].wg_public_key == remote.wg_public_key:
                del self._waiting[remote.node_id]
        keys = {n.wg_public_key for n in keep}
        gone = remote.wg_public_key and remote.wg_public_key not in keys
        if gone and self._has_device():
            self.device.remove_peer(remote.wg_public_key)
            removed.append(f"peer {fingerprint(remote.wg_public_key)}")
        if self._peers.get(remote.node_id) == remote.wg_public_key:
            del self._peers[remote.node_id]
        needed = {p for n in keep for p in allowed_ips(n)}
        with netlink.host_session() as links, netlink.translated("removing a node from the "
                                                                  "WireGuard mesh"):
            index = links.ifindex(self.device.ifname)
            if index is None:
                return removed
            for prefix in allowed_ips(remote):
                if prefix not in needed and _delete_route(links, index, prefix):
                    removed.append(f"route {prefix}")
        return removed

    def prune(self, local: NodeInfo, keep: Collection[NodeInfo],
              foreign: Collection[str] = ()) -> list[str]:
        """Exactly what `keep` needs: stale routes (ours, protocol RTPROT_MESH, also a VXLAN
        mesh's unless to a `foreign` prefix: the VXLAN mesh's beside this one, while encryption
        is rolled out), stale peers and stale links go; missing or different ones are set
        again."""
        self._index = None
        changed: list[str] = []
        with netlink.host_session() as links, netlink.translated("pruning the WireGuard mesh"):
            for name in self.stale_links:
                if links.delete_link_named(name):
                    changed.append(f"device {name}")
        index = self._ready(local)
        routes = set(self.catch_all) | {p for n in keep for p in allowed_ips(n)}
        with netlink.host_session() as links, netlink.translated("pruning the WireGuard mesh"):
            for family in (socket.AF_INET, socket.AF_INET6):
                for route in links.routes(family, RTPROT_MESH):
                    ours = route.oif == index and route.gateway is None
                    if (ours and route.dst in routes) or (not ours and route.dst in foreign):
                        continue
                    if links.delete_route(route.dst, route.oif, route.gateway, RTPROT_MESH,
                                          scope=None if route.gateway else RT_SCOPE_LINK):
                        changed.append(f"route {route.dst}")
        want = {n.wg_public_key: n for n in keep if n.wg_public_key}
        held = {p.public_key: p for p in self.device.status().peers}
        for key in held:
            if key not in want:
                self.device.remove_peer(key)
                changed.append(f"peer {fingerprint(key)}")
        self._peers = {n.node_id: k for k, n in want.items() if k in held}
        for key, remote in want.items():
            peer = held.get(key)
            if peer is None or sorted(peer.allowed_ips) != sorted(allowed_ips(remote)):
                self.program(local, remote)
                changed.append(f"restored node {remote.name}")
        return changed

    def _has_device(self) -> bool:
        with netlink.host_session() as links, netlink.translated("finding the WireGuard device"):
            return links.ifindex(self.device.ifname) is not None

    # ---- the views --------------------------------------------------------------------------

    def view(self, local: NodeInfo, remotes: Collection[NodeInfo]) -> dict[str, Any]:
        """The device as last read (each tick, never per request), each peer named by the node
        whose key it has: for REST's /v1/nodes, vswitchctl and the metrics."""
        at, status = self.last_status
        names = {n.wg_public_key: n.name for n in remotes if n.wg_public_key}
        peers = [] if status is None else [{
            "node": names.get(p.public_key, ""),
            "publicKey": p.public_key,
            "fingerprint": fingerprint(p.public_key),
            "endpoint": p.endpoint,
            "allowedIPs": list(p.allowed_ips),
            "established": p.latest_handshake > 0 and at - p.latest_handshake < SESSION_SECONDS,
            "latestHandshake": p.latest_handshake,
            "rxBytes": p.rx_bytes,
            "txBytes": p.tx_bytes,
        } for p in status.peers]
        return {
            "interface": self.device.ifname,
            "implementation": self.device.running,
            "publicKey": local.wg_public_key,
            "fingerprint": fingerprint(local.wg_public_key),
            "listenPort": self.device.port,
            "readAt": at,
            "peers": peers,
        }


class BothMeshes:
    """The rollout's middle step (`Encryption: wireguard-permissive`), whoever carries the two
    meshes (Linux: PermissiveMesh; VPP: vpp/node_mesh.VppPermissive): WireGuard to every node
    that publishes a key, clear VXLAN to the others, both up, so that a node still in clear
    reaches this one and the other way round.

    A remote node's prefixes are routed by exactly one of the two meshes: programming it in one
    replaces the routes the other held (same prefixes, replace semantics) and then removes the
    other's remaining objects (FDB, neighbors, tunnel; or the peer)."""

    wireguard: Any  # the WireGuard half: program, unprogram, prepare, refresh_local, view, key
    vxlan: Any  # the clear half: program, unprogram

    def __init__(self, wireguard: Any, vxlan: Any) -> None:
        self.wireguard = wireguard
        self.vxlan = vxlan
        self.key: KeyFile = wireguard.key

    def prepare(self, local: NodeInfo) -> None:
        self.wireguard.prepare(local)

    def refresh_local(self, local: NodeInfo) -> NodeInfo | None:
        fresh: NodeInfo | None = self.wireguard.refresh_local(local)
        return fresh

    def view(self, local: NodeInfo, remotes: Collection[NodeInfo]) -> dict[str, Any]:
        seen: dict[str, Any] = self.wireguard.view(local, remotes)
        return seen

    def program(self, local: NodeInfo, remote: NodeInfo) -> None:
        if remote.wg_public_key:
            self.wireguard.program(local, remote)
            self.vxlan.unprogram(local, remote)
        else:
            self.vxlan.program(local, remote)
            self.wireguard.unprogram(local, remote)
            self.programmed_clear(remote)

    def programmed_clear(self, remote: NodeInfo) -> None:
        """What a node in clear needs beyond the clear mesh's own objects (none here)."""

    def unprogram(self, local: NodeInfo, remote: NodeInfo,
                  keep: Collection[NodeInfo] = ()) -> list[str]:
        removed: list[str] = self.wireguard.unprogram(local, remote, keep)
        clear: list[str] = self.vxlan.unprogram(local, remote, keep)
        return removed + clear


class PermissiveMesh(BothMeshes):
    """`BothMeshes` in Linux: the WireGuard device and the VXLAN device."""

    wireguard: WireGuardMesh
    vxlan: KernelMesh

    def __init__(self, wireguard: WireGuardMesh, vxlan: KernelMesh) -> None:
        super().__init__(wireguard, vxlan)
        self.device = wireguard.device

    def uplink(self, local: NodeInfo) -> Uplink | None:
        return find_uplink(local)

    def check_mtu(self, local: NodeInfo) -> None:
        self.wireguard.check_mtu(local)  # the larger overhead of the two

    def prune(self, local: NodeInfo, keep: Collection[NodeInfo]) -> list[str]:
        encrypted = [n for n in keep if n.wg_public_key]
        clear = [n for n in keep if not n.wg_public_key]
        theirs = {p for n in clear for p in allowed_ips(n)}
        ours = {p for n in encrypted for p in allowed_ips(n)} | set(self.wireguard.catch_all)
        return (self.vxlan.prune(local, clear, foreign=ours)
                + self.wireguard.prune(local, encrypted, foreign=theirs))


def allowed_ips(remote: NodeInfo) -> list[str]:
    """What a remote node's peer may send from, and what is routed to it."""
    return [*remote.pod_subnets, host_prefix(remote.vxlan_ip)]


def _route(links: Session, index: int, prefix: str) -> None:
    links.replace_route(prefix, None, index, proto=RTPROT_MESH)


def _delete_route(links: Session, index: int, prefix: str) -> bool:
    return links.delete_route(prefix, index, None, RTPROT_MESH, scope=RT_SCOPE_LINK)


__all__ = ["BothMeshes", "PermissiveMesh", "WireGuardMesh", "allowed_ips"]

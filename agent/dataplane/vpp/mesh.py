"""Contiv-VPP's node mesh in VPP: a VXLAN tunnel per remote node, bridged to a BVI in the pod VRF.

Node-wide (made once per VPP connection, found again by tag):

    BVI        loopback tagged `BVI_TAG`, MAC = node.vxlan_mac(this node), in the pod VRF (both
               families: the IPv6 table is made when pods are IPv4-only) with this node's
               VXLAN address (VxlanCIDR prefix), IPv6 enabled, GSO, up; a BVI found by its tag
               but not up was cut short while being made and is completed
    bridge     domain `bd_id`: learning, flooding and unknown-unicast flooding off, forwarding
               on; the BVI in it as the BVI port, split-horizon group 1

Per remote node:

    tunnel     VXLAN, src = VPP's end of this node's VPP-host interconnect, dst = the remote
               node's (host 1 of each node's vppHostSubnet, e.g. 172.30.1.1 -> 172.30.2.1),
               VNI, encap in the main VRF; tagged `TUNNEL_TAG<ID>`; in the bridge domain with
               split-horizon group 1
    ARP / ND   static neighbors on the BVI: remote VXLAN address and fe80::2b:0:<ID> ->
               remote VXLAN MAC
    L2 FIB     static: remote VXLAN MAC -> the tunnel
    routes     pod VRF: every remote pod subnet and its VPP-host subnet via the BVI, next hop
               the remote VXLAN address (IPv6 subnets: fe80::2b:0:<ID>, as in the kernel mesh)

The uplink stays Linux's (docs/vpp.md): VPP's encapsulated packets leave the main VRF by its
default route to the node, whose routing carries them to the remote node IP (node_mesh.py adds
the kernel routes), and the remote node delivers them to VPP through its connected interconnect
route. Contiv sourced the tunnels from the node IP, which VPP owned there.

Split-horizon group 1 on both the BVI and the tunnels keeps a packet from one tunnel from being
sent out of another. Everything is idempotent (VPP replaces a route, neighbor or L2 FIB entry that
is added again; tunnels are found by tag), and `prune` removes what no remote node explains, found
by tag, by the BVI as route path and neighbor interface, and in the bridge domain's FIB. The
tags start with `vswitch-cni/` (the driver's own objects), never `vswitch-cni:` (pods), so the
pod reconcile never takes a tunnel for an orphan pod interface.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from agent.dataplane.vpp import interfaces, ip, neighbors
from agent.dataplane.vpp.api import VppApi, VppCallFailed
from agent.dataplane.vpp.names import BASE_TAG_PREFIX
from agent.model.node import VXLAN_OVERHEAD, NodeInfo, link_local
from agent.model.pod import IPInterface

log = logging.getLogger(__name__)

ANY = 0xFFFFFFFF
BVI_TAG = BASE_TAG_PREFIX + "mesh-bvi"
TUNNEL_TAG = BASE_TAG_PREFIX + "mesh-node/"
PORT_NORMAL, PORT_BVI = 0, 1  # l2_port_type
SPLIT_HORIZON = 1
VXLAN_PORT = 4789
POD_TABLE_NAME = "vswitch-cni-pods"  # as the driver names the pod VRF (base.py)


def tunnel_endpoint(node: NodeInfo) -> str:
    """The node's VXLAN tunnel end: VPP's end of its VPP-host interconnect (host 1 of its
    vppHostSubnet, as ipam computes vpp_host_ip)."""
    return str(ipaddress.ip_network(node.vpp_host_subnet).network_address + 1)


@dataclass(frozen=True)
class HeldTunnel:
    sw_if_index: int
    node_id: int
    src: str
    dst: str
    vni: int
    encap_vrf_id: int


class VppMesh:
    """`MeshDataplane` in VPP (see the module docstring)."""

    def __init__(
        self,
        api: VppApi,
        pod_vrf_id: int,
        main_vrf_id: int,
        vxlan_cidr: ipaddress.IPv4Network | ipaddress.IPv6Network,
        vni: int = 10,
        bd_id: int = 10,
        on_interface: Callable[[int], None] | None = None,
    ) -> None:
        """`on_interface`: called with the BVI's sw_if_index once per VPP connection, after it
        is settled (VPP's cnat on it, when VPP translates Services: answers from another
        node's backends enter VPP there)."""
        self.api = api
        self.on_interface = on_interface
        self.pod_vrf_id = pod_vrf_id
        self.main_vrf_id = main_vrf_id
        self.vxlan_prefixlen = vxlan_cidr.prefixlen
        self.vni = vni
        self.bd_id = bd_id
        self._lock = threading.Lock()
        self._bvi: tuple[int, int] | None = None  # (api generation, sw_if_index)

    def generation(self) -> int:
        """Changes when VPP was (re)connected: a restarted VPP has lost the mesh."""
        return int(self.api.generation)

    def overhead(self, local: NodeInfo) -> int:
        """VXLAN's bytes over a pod's packet; the outer family is the VPP-host subnet's."""
        return VXLAN_OVERHEAD[ipaddress.ip_network(local.vpp_host_subnet).version]

    def describe(self, local: NodeInfo) -> str:
        return f"VXLAN ({self.overhead(local)} bytes)"

    # ---- node-wide --------------------------------------------------------------------------

    def bvi(self, local: NodeInfo) -> int:
        """The BVI's sw_if_index, made (with the bridge domain) when missing, and completed
        when an earlier making of it was cut short (see `_settle_bvi`)."""
        with self._lock:
            self.api.connect()
            if self._bvi is not None and self._bvi[0] == self.api.generation:
                return self._bvi[1]
            found = interfaces.by_tag(self.api, BVI_TAG)
            if found:
                index, complete = found[0].sw_if_index, found[0].admin_up
            else:
                index = interfaces.create_loopback(self.api, local.vxlan_mac)
                interfaces.set_tag(self.api, index, BVI_TAG)
                complete = False
            if not complete:
                self._settle_bvi(index, local)
            self._bridge(index)
            if self.on_interface is not None:
                self.on_interface(index)
            self._bvi = (self.api.generation, index)
            return index

    def _settle_bvi(self, index: int, local: NodeInfo) -> None:
        """Everything the BVI needs, each step skipped when already done: the BVI is found by
        its tag, so one whose making failed half-way (a refusal, a kill) is completed by the
        next try instead of being used as it is. Admin up comes last and marks it complete.

        A pod's TCP arrives in GSO packets of up to 64 KiB (AF_PACKET with offload): VPP must
        segment them as they are routed to the BVI, before the VXLAN encapsulation. Left
        whole, they leave VPP as one VXLAN packet flagged TCP GSO, which Linux then cuts
        wrongly (outer header fixed, inner one not). (Not on the tunnels: a VXLAN tunnel
        reports GSO support, so VPP's GSO node passes packets whole there.)"""
        settle_in_pod_vrf(self.api, index, self.pod_vrf_id,
                          ipaddress.ip_interface(f"{local.vxlan_ip}/{self.vxlan_prefixlen}"),
                          "the mesh BVI")

    def _bridge(self, bvi: int) -> None:
        domains = self.api.dump("bridge_domain_dump", bd_id=self.bd_id, sw_if_index=ANY)
        if not domains:
            self.api.call(
                "bridge_domain_add_del_v2", bd_id=self.bd_id, flood=False, uu_flood=False,
                forward=True, learn=False, arp_term=False, arp_ufwd=False, mac_age=0,
                bd_tag="vswitch-cni-mesh", is_add=True, context=f"bridge domain {self.bd_id}",
            )
        elif int(domains[0].bvi_sw_if_index) == bvi:
            return
        self._port(bvi, PORT_BVI)

    def _port(self, sw_if_index: int, port_type: int) -> None:
        self.api.call(
            "sw_interface_set_l2_bridge", rx_sw_if_index=sw_if_index, bd_id=self.bd_id,
            port_type=port_type, shg=SPLIT_HORIZON, enable=True,
        )

    # ---- per remote node --------------------------------------------------------------------

    def program(self, local: NodeInfo, remote: NodeInfo) -> None:
        bvi = self.bvi(local)
        tunnel = self._tunnel(local, remote)
        for hop in (remote.vxlan_ip, link_local(remote.node_id)):
            neighbors.add(self.api, bvi, ipaddress.ip_address(hop), remote.vxlan_mac)
        self.api.call(
            "l2fib_add_del", mac=remote.vxlan_mac, bd_id=self.bd_id, sw_if_index=tunnel,
            is_add=True, static_mac=True, filter_mac=False, bvi_mac=False,
            context=f"L2 FIB {remote.vxlan_mac} -> tunnel to {remote.name}",
        )
        for subnet, hop in routes_to(remote):
            path = {**ip.via_interface(subnet, bvi), "nh": _next_hop(hop)}
            ip.add_route(self.api, self.pod_vrf_id, subnet, path)

    def _tunnel(self, local: NodeInfo, remote: NodeInfo) -> int:
        """The tunnel to `remote`, created (or re-created when its endpoints changed)."""
        src, dst = tunnel_endpoint(local), tunnel_endpoint(remote)
        for held in self.tunnels():
            if held.node_id != remote.node_id:
                continue
            if (held.src, held.dst, held.vni) == (src, dst, self.vni):
                return held.sw_if_index
            self._delete_tunnel(held)
        reply = self.api.call(
            "vxlan_add_del_tunnel_v3", is_add=True, instance=ANY,
            src_address=ipaddress.ip_address(src),
            dst_address=ipaddress.ip_address(dst), src_port=VXLAN_PORT,
            dst_port=VXLAN_PORT, mcast_sw_if_index=ANY, encap_vrf_id=self.main_vrf_id,
            decap_next_index=ANY, vni=self.vni, is_l3=False,
            context=f"VXLAN tunnel to {remote.name} ({dst})",
        )
        index = int(reply.sw_if_index)
        interfaces.set_tag(self.api, index, f"{TUNNEL_TAG}{remote.node_id}")
        interfaces.set_admin_up(self.api, index)
        self._port(index, PORT_NORMAL)
        return index

    def tunnels(self) -> list[HeldTunnel]:
        """Our tunnels in VPP (tagged), with their endpoints."""
        tagged = {i.sw_if_index: int(i.tag[len(TUNNEL_TAG):])
                  for i in interfaces.dump(self.api) if i.tag.startswith(TUNNEL_TAG)}
        return [
            HeldTunnel(int(d.sw_if_index), tagged[int(d.sw_if_index)], str(d.src_address),
                       str(d.dst_address), int(d.vni), int(d.encap_vrf_id))
            for d in self.api.dump("vxlan_tunnel_v2_dump", sw_if_index=ANY)
            if int(d.sw_if_index) in tagged
        ]

    def _delete_tunnel(self, held: HeldTunnel) -> None:
        self.api.call_present(  # a tunnel already gone: done
            "vxlan_add_del_tunnel_v3", is_add=False, instance=ANY,
            src_address=ipaddress.ip_address(held.src),
            dst_address=ipaddress.ip_address(held.dst), src_port=VXLAN_PORT,
            dst_port=VXLAN_PORT, mcast_sw_if_index=ANY, encap_vrf_id=held.encap_vrf_id,
            decap_next_index=ANY, vni=held.vni, is_l3=False,
        )

    def missing(self, local: NodeInfo, keep: Collection[NodeInfo]) -> list[NodeInfo]:
        """The nodes of `keep` whose tunnel VPP does not hold (a restarted VPP)."""
        held = {t.node_id: t.dst for t in self.tunnels()}
        return [n for n in keep if held.get(n.node_id) != tunnel_endpoint(n)]

    def unprogram(
        self, local: NodeInfo, remote: NodeInfo, keep: Collection[NodeInfo] = ()
    ) -> list[str]:
        return self.prune(local, keep, of=remote)

    def remove(self, local: NodeInfo) -> list[str]:
        """Removes the whole mesh from VPP: every remote node's objects, then the BVI and the
        bridge domain (a node whose mesh is Linux's now, `VXLANOwner: linux`). A BVI left
        there would keep the VXLAN range in the pod VRF, where Linux now holds it."""
        self.api.connect()
        found = interfaces.by_tag(self.api, BVI_TAG)
        if not found:
            return []
        removed = self.prune(local, ())
        with self._lock:
            for itf in found:
                interfaces.delete_loopback(self.api, itf.sw_if_index)
                removed.append(f"mesh BVI {itf.name}")
            self._bvi = None
            if self.api.dump("bridge_domain_dump", bd_id=self.bd_id, sw_if_index=ANY):
                self.api.call_present("bridge_domain_add_del_v2", bd_id=self.bd_id,
                                      is_add=False, context=f"bridge domain {self.bd_id}")
                removed.append(f"bridge domain {self.bd_id}")
        return removed

    def prune(
        self, local: NodeInfo, keep: Collection[NodeInfo], of: NodeInfo | None = None
    ) -> list[str]:
        """Removes mesh objects no node in `keep` explains (only those of node `of` when
        given); returns what it removed."""
        if not interfaces.by_tag(self.api, BVI_TAG):
            return []  # the mesh was never made on this VPP
        bvi = self.bvi(local)
        wanted = {n.node_id: n for n in keep}
        removed: list[str] = []
        for held in self.tunnels():
            want = wanted.get(held.node_id)
            if (of is None or held.node_id == of.node_id) and (
                    want is None or tunnel_endpoint(want) != held.dst):
                self._delete_tunnel(held)
                removed.append(f"tunnel to {held.dst} (node {held.node_id})")
        removed += self._prune_l2fib(wanted, of)
        removed += self._prune_neighbors(bvi, wanted, of)
        removed += self._prune_routes(bvi, wanted, of)
        return removed

    def _prune_l2fib(self, wanted: dict[int, NodeInfo], of: NodeInfo | None) -> list[str]:
        macs = {n.vxlan_mac for n in wanted.values()}
        out = []
        for entry in self.api.dump("l2_fib_table_dump", bd_id=self.bd_id):
            mac = str(entry.mac)
            # the BVI's own entry (VPP makes it with the BVI port) is never a remote node's
            if entry.bvi_mac or not entry.static_mac or mac in macs or (
                    of is not None and mac != of.vxlan_mac):
                continue
            # VPP deletes an entry only given its own sw_if_index (or 0); a static entry
            # outlives its tunnel, naming the deleted interface
            self.api.call_present("l2fib_add_del", mac=mac, bd_id=self.bd_id,
                                  sw_if_index=int(entry.sw_if_index), is_add=False,
                                  static_mac=True, filter_mac=False, bvi_mac=False)
            out.append(f"L2 FIB {mac}")
        return out

    def _prune_neighbors(
        self, bvi: int, wanted: dict[int, NodeInfo], of: NodeInfo | None
    ) -> list[str]:
        keep = {(ip_, n.vxlan_mac) for n in wanted.values()
                for ip_ in (n.vxlan_ip, link_local(n.node_id))}
        mine = None if of is None else {of.vxlan_ip, link_local(of.node_id)}
        out = []
        for (_, address), mac in neighbors.dump(self.api, bvi).items():
            if (address, mac) in keep or (mine is not None and address not in mine):
                continue
            neighbors.delete(self.api, bvi, ipaddress.ip_address(address), mac)
            out.append(f"neighbor {address}")
        return out

    def _prune_routes(
        self, bvi: int, wanted: dict[int, NodeInfo], of: NodeInfo | None
    ) -> list[str]:
        keep = {str(s) for n in wanted.values() for s, _ in routes_to(n)}
        mine = None if of is None else {str(s) for s, _ in routes_to(of)}
        out = []
        for ipv6 in (False, True):
            for prefix, route in ip.routes(self.api, self.pod_vrf_id, ipv6).items():
                if bvi not in route.sw_if_indexes or str(prefix) in keep:
                    continue
                if mine is not None and str(prefix) not in mine:
                    continue
                ip.delete_route(self.api, self.pod_vrf_id, prefix)
                out.append(f"route {prefix}")
        return out


def settle_in_pod_vrf(api: VppApi, index: int, pod_vrf_id: int, address: IPInterface | int,
                      what: str) -> None:
    """A mesh interface (the BVI, VPP's WireGuard interface) in the pod VRF in both families,
    with `address` (or unnumbered to the interface of that sw_if_index), IPv6 on, GSO (VPP
    segments GSO packets routed to it) and up: each step skipped when done, so a making cut
    short is completed by the next; up comes last."""
    tables = ip.tables(api)
    for ipv6 in (False, True):
        # The IPv6 next hops over it (fe80::2b:0:<ID>) need the pod VRF in IPv6 too, also
        # where pods are IPv4-only and the driver made only the IPv4 table: VPP refuses an
        # interface into a table that does not exist.
        if (pod_vrf_id, ipv6) not in tables:
            ip.add_table(api, pod_vrf_id, ipv6, POD_TABLE_NAME)
        if interfaces.get_table(api, index, ipv6) != pod_vrf_id:
            interfaces.set_table(api, index, pod_vrf_id, ipv6)
    if isinstance(address, int):
        if interfaces.unnumbered_to(api, index) != address:
            interfaces.set_unnumbered(api, index, address)
    elif address not in interfaces.addresses(api, index):
        interfaces.add_address(api, index, address)
    try:
        api.call("sw_interface_ip6_enable_disable", sw_if_index=index, enable=True)
    except VppCallFailed as exc:
        if exc.retval != interfaces.VALUE_EXIST:  # enabled by the try before: fine
            raise
    # Enabling it again (a try cut short after it) only counts one more reference.
    api.call("feature_gso_enable_disable", sw_if_index=index, enable_disable=True,
             context=f"GSO on {what}")
    interfaces.set_admin_up(api, index)


def routes_to(remote: NodeInfo) -> list[tuple[ip.IPNetwork, str]]:
    """(subnet, next hop) of every pod-VRF route towards `remote`."""
    out: list[tuple[ip.IPNetwork, str]] = []
    for text in (*remote.pod_subnets, remote.vpp_host_subnet):
        subnet = ipaddress.ip_network(text)
        out.append((subnet, link_local(remote.node_id) if subnet.version == 6
                    else remote.vxlan_ip))
    return out


def _next_hop(address: str) -> dict[str, Any]:
    parsed = ipaddress.ip_address(address)
    return {"address": {"ip6" if parsed.version == 6 else "ip4": parsed}}

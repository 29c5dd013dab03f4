"""VppDataplane: pods wired into FD.io VPP (the `Dataplane` protocol of agent/dataplane).

Per pod: the mode's link (veth + AF_PACKET or TAP v2) and VPP's interface for it, tagged with
its owner, in the pod VRF, unnumbered to the gateway loopback, MTU set, up; a host route
(/32, /128) to each pod address via the interface and a static neighbor pod IP -> pod MAC. The
pod's gateway MAC is VPP's interface MAC. Each step goes on the undo stack.

Connection: VPP down -> TryAgainLater at once; the next call connects again, and a new
connection re-applies the base configuration (a restarted VPP has lost it).
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Sequence

from agent.dataplane.undo import UndoStack
from agent.dataplane.vpp import (
    afpacket,
    base,
    cnat_node,
    interfaces,
    ip,
    names,
    neighbors,
    tap,
    teardown,
)
from agent.dataplane.vpp.api import VppApi, VppCalls
from agent.dataplane.vpp.config import VppConfig
from agent.dataplane.vpp.modes import Port, WiringMode
from agent.dataplane.vpp.pairs import macvlans_work, settle_waiting_ends
from agent.dataplane.vpp.podlinks import PodLinks
from agent.dataplane.vpp.podpool import PodPool, PoolSettings
from agent.dataplane.vpp.tapv2 import TapV2
from agent.dataplane.vpp.veth_afpacket import VethAfPacket
from agent.infra import failpoints
from agent.linux.netns import PodNetns
from agent.model.errors import CniError, DataplaneFailure
from agent.model.pod import IPAddress, PodKey, PodNetwork, Wiring

log = logging.getLogger(__name__)


class VppDataplane:
    name = "vpp"

    def __init__(self, config: VppConfig) -> None:
        self.cfg = config
        self.api = VppApi(config.api_socket, config.api_dir, config.connect_timeout,
                          config.request_timeout, config.client_name)
        # veth host ends, reused names (podlinks.py); in TAP mode too: orphans of a veth run
        self.links = PodLinks(config.pod_link_prefix)
        # veth mode: spares for ADD and background deletes for DEL (podpool.py)
        settings = PoolSettings.of(config)  # None: no pool
        self.pool = None if settings is None else PodPool(
            self.api, self.links, settings, lambda: self._ensure().gateway_sw_if_index)
        self.veth = VethAfPacket(self.api, config.mtu, config.afpacket, self.links,
                                 config.pod_features_off, self.pool)
        self.mode: WiringMode = (
            TapV2(self.api, config.mtu, config.tap_rx_ring_size, config.tap_tx_ring_size,
                  config.vhost_net_path)
            if config.use_tap
            else self.veth
        )
        self._base: base.BaseObjects | None = None
        self._base_generation = -1
        self._base_lock = threading.Lock()

    # --- connection and base configuration ------------------------------------------------
    def start(self) -> None:
        self.mode.check_usable()
        self._require_plugins()
        self._ensure()
        if self.cfg.pod_features_off and not self.cfg.use_tap:
            settle_waiting_ends(self.cfg.spare_link_prefix, self.cfg.pod_features_off)
        if self.pool is not None and not macvlans_work(self.cfg.pod_pool):
            self.pool = self.veth.pool = None  # pods made as with VppPodPool 0
        if self.pool is not None:
            self.pool.start()

    def _require_plugins(self) -> None:
        """Names the VPP plugins this configuration needs that the running VPP lacks (only
        those: a VPP without the tap plugin serves veth + AF_PACKET pods)."""
        needed = {"af_packet": "af_packet_create_v3"}
        if self.cfg.use_tap:
            needed["tap"] = "tap_create_v3"
        if self.cfg.cnat:
            needed["cnat"] = "cnat_translation_update"
        missing = [plugin for plugin, message in needed.items() if not self.api.has(message)]
        if missing:
            raise DataplaneFailure(
                f"the running VPP lacks the plugin(s) {', '.join(missing)}",
                "enable them in VPP's startup config (plugins { plugin "
                f"{missing[0]}_plugin.so {{ enable }} }})",
            )

    def ensure(self) -> None:
        """Connected, with the base configuration in place (the node mesh builds on it)."""
        self._ensure()

    def _ensure(self) -> base.BaseObjects:
        """Connected, with the base configuration applied on this connection's VPP."""
        with self._base_lock:
            self.api.connect()
            if self._base is None or self._base_generation != self.api.generation:
                generation = self.api.generation
                self._base = base.ensure_base(self.api, self.cfg)
                if self.cfg.cnat:
                    cnat_node.setup(self.api, self.cfg.pod_vrf_id, self.cfg.pod_subnets,
                                    self._base.host_sw_if_index)
                self._base_generation = generation
                log.info("VPP base configuration in place (gateway sw_if_index %d)",
                         self._base.gateway_sw_if_index)
            return self._base

    def ready(self) -> bool:
        """Connected, base configuration in place, and VPP answering now (a control ping:
        a VPP that died is noticed here, not only by the next ADD)."""
        try:
            self._ensure()
            self.api.call("control_ping")
        except CniError:
            return False
        return True

    def generation(self) -> int:
        return self.api.generation

    def restore(self, pod: PodNetwork, wiring: Wiring) -> Wiring | None:
        """VPP lost the pod's interface (restart) but its link may have survived."""
        objs = self._ensure()
        tag = names.pod_tag(pod.key)
        for itf in interfaces.by_tag(self.api, tag):
            self._unwire_vpp(pod, itf.sw_if_index)
        undo = UndoStack()
        try:
            port = self.mode.adopt(pod, tag, undo, wiring)
            if port is None:
                return None
            self._configure(pod, port, objs.gateway_sw_if_index, undo)
        except BaseException:
            undo.unwind()
            raise
        return Wiring(
            host_ifname=port.host_ifname,
            pod_mac=port.pod_mac,
            gateway_mac=port.vpp_mac,
            extra={"sw_if_index": str(port.sw_if_index), "mode": self.mode.name, "tag": tag},
        )

    def pending_link_deletes(self) -> int:
        """Pairs DELs retired to the pool whose AF_PACKET interface and veth are not deleted
        yet, and veths (VPP's interface gone) waiting for the reaper (the agent's
        vswitch_cni_pending_link_deletes gauge)."""
        retiring = len(self.pool.retiring()) if self.pool is not None else 0
        return retiring + self.veth.reaper.pending()

    def pod_pool_state(self) -> tuple[int, dict[str, int]] | None:
        """The pool's spares ready now and its ADDs by what they got (the agent's
        vswitch_cni_vpp_pod_pool_* series); None without a pool."""
        if self.pool is None:
            return None
        return self.pool.ready(), self.pool.take_counts()

    def close(self) -> None:
        """Deletes the spares and what DELs left to delete (VPP's interfaces first), then
        disconnects; pods stay wired."""
        if self.pool is not None:
            self.pool.close()
        self.veth.reaper.drain()  # VPP let go of these veths already
        self.api.close()

    def teardown(self) -> list[str]:
        """Removes the base configuration (the node leaves); pods must be detached first."""
        self.veth.reaper.drain()
        with self._base_lock:
            self.api.connect()
            removed = teardown.remove_pairs(self.api, self.links)  # spares, retired pairs
            removed += teardown.remove_base(self.api, self.cfg)
            self._base = None
        return removed

    # --- pods -----------------------------------------------------------------------------
    def attach(
        self, pod: PodNetwork, undo: UndoStack, netns: PodNetns | None = None
    ) -> Wiring:
        if self.pool is None:
            return self._attach(pod, undo, netns)
        with self.pool.request():  # the pool's loop leaves VPP to this ADD meanwhile
            return self._attach(pod, undo, netns)

    def _attach(self, pod: PodNetwork, undo: UndoStack, netns: PodNetns | None) -> Wiring:
        # VPP opens a TAP's namespace by its path itself; the veth mode moves a spare's end
        # into `netns` (or makes its pair with agent/linux/netlink.create_veth).
        objs = self._ensure()
        self.mode.check_usable()
        tag = names.pod_tag(pod.key)
        self._remove_leftovers(pod, tag)
        port = self.mode.create(pod, tag, undo, netns)
        self._configure(pod, port, objs.gateway_sw_if_index, undo)
        return Wiring(
            host_ifname=port.host_ifname,
            pod_mac=port.pod_mac,
            gateway_mac=port.vpp_mac,
            extra={"sw_if_index": str(port.sw_if_index), "mode": self.mode.name, "tag": tag},
        )

    def _pod_interfaces(
        self, pod: PodNetwork, tag: str, wiring: Wiring | None
    ) -> list[interfaces.VppInterface]:
        """The pod's VPP interfaces (more than one: leftovers). By name when the mode knows it
        (as fast with 10 pods as with 500; finds an interface whose tagging was interrupted;
        skips one another pod's tag claims: a retried DEL's name may be reused), else by tag."""
        found = self.mode.vpp_names(pod, wiring)
        if found is None:
            return interfaces.by_tag(self.api, tag)
        named = [i for i in (interfaces.by_name(self.api, n) for n in found) if i is not None]
        return [i for i in named if i.tag == tag or not i.tag.startswith(names.POD_TAG_PREFIX)]

    def _remove_leftovers(self, pod: PodNetwork, tag: str) -> None:
        """A failed or repeated ADD may have left the pod's objects: start clean."""
        for itf in self._pod_interfaces(pod, tag, None):
            log.info("removing leftover VPP interface %s of %s", itf.name, pod.key)
            self._unwire(pod, itf.sw_if_index, None)
        self.mode.remove(pod, None, None)

    def _configure(self, pod: PodNetwork, port: Port, gateway: int, undo: UndoStack) -> None:
        """The pod's interface and addresses in VPP, sent as one pipeline (one round trip)."""
        sw = port.sw_if_index
        with self.api.pipeline() as batch:
            if port.tag is not None:
                interfaces.set_tag(batch, sw, port.tag)
            if not port.prepared:  # a spare is in the pod VRF, unnumbered, MTU set and up
                for ipv6 in sorted({a.version == 6 for a in pod.addresses}):
                    interfaces.set_table(batch, sw, self.cfg.pod_vrf_id, ipv6)
                interfaces.set_unnumbered(batch, sw, gateway)
                interfaces.set_mtu(batch, sw, pod.mtu or self.cfg.mtu)
                interfaces.set_admin_up(batch, sw)
            if self.cfg.cnat:  # before the pod has routes: its first packet is translated
                batch.flush()
                cnat_node.enable(self.api, sw)
            for addr in pod.addresses:
                self._add_pod_address(batch, sw, addr.ip, port.pod_mac, undo)

    def _add_pod_address(self, api: VppCalls, sw: int, addr: IPAddress, mac: str,
                         undo: UndoStack) -> None:
        """A static neighbor and a host route for one pod address. Their undos are pushed
        as they are asked for (through a pipeline: before VPP has answered); deleting what
        VPP never added counts as done."""
        vrf = self.cfg.pod_vrf_id
        neighbors.add(api, sw, addr, mac)
        undo.push(f"delete neighbor {addr}", lambda: neighbors.delete(self.api, sw, addr, mac))
        host = ipaddress.ip_network(addr)  # /32 or /128
        ip.add_route(api, vrf, host, ip.via_interface(host, sw))
        undo.push(f"delete route {host}", lambda: ip.delete_route(self.api, vrf, host))

    def _unwire(self, pod: PodNetwork, sw_if_index: int | None, wiring: Wiring | None) -> None:
        """Routes, neighbors, then the interface and link; what is missing is skipped."""
        self._unwire_vpp(pod, sw_if_index)
        failpoints.hit("del:vpp-unrouted")
        if self.pool is None:
            self.mode.remove(pod, sw_if_index, wiring)
            return
        # Routeless, VPP sends it nothing from now on; the slow deletes go to the pool
        # (podpool.py). Not admin down: VPP would set the veth down with it, and its own
        # socket on the veth would fail (`af_packet_fd_error: Network is down`).
        if sw_if_index is not None:
            interfaces.set_tag(self.api, sw_if_index, names.RETIRED_TAG)
        self.veth.retire(pod, sw_if_index, wiring, self.api.generation)

    def _unwire_vpp(self, pod: PodNetwork, sw_if_index: int | None) -> None:
        """The pod's routes and neighbors in VPP (only ours), in two round trips whatever the
        pod's address count: its host routes looked up, then ours and its neighbors on its
        interface deleted (one that is gone already counts as deleted)."""
        vrf = self.cfg.pod_vrf_id
        hosts = [ipaddress.ip_network(f"{a.ip}/{a.max_prefixlen}") for a in pod.addresses]
        found = self.api.call_all_present([ip.lookup_request(vrf, h) for h in hosts])
        # Only our route: the prefix may belong to another pod by now.
        deletes = [ip.delete_route_request(vrf, host)
                   for host, reply in zip(hosts, found, strict=True)
                   if reply is not None and ip.from_reply(reply).through(sw_if_index)]
        if sw_if_index is not None:  # on the pod's own interface: ours whatever their MAC
            mac = names.pod_mac(pod.key)
            deletes += [neighbors.delete_request(sw_if_index, a.ip, mac) for a in pod.addresses]
        self.api.call_all_present(deletes)

    def detach(self, pod: PodNetwork, wiring: Wiring | None) -> None:
        if self.pool is None:
            self._detach(pod, wiring)
            return
        with self.pool.request():  # the pool's loop leaves VPP to this DEL meanwhile
            self._detach(pod, wiring)

    def _detach(self, pod: PodNetwork, wiring: Wiring | None) -> None:
        # VPP away: nothing is removed, not even the veth, which a VPP that stopped answering
        # may still poll (veth_afpacket.py); the runtime retries the DEL.
        self._ensure()
        found = self._pod_interfaces(pod, names.pod_tag(pod.key), wiring)
        if not found:
            self._unwire(pod, None, wiring)
        for itf in found:
            self._unwire(pod, itf.sw_if_index, wiring)

    def check(self, pod: PodNetwork, wiring: Wiring) -> list[str]:
        objs = self._ensure()
        tag = names.pod_tag(pod.key)
        found = [i for i in self._pod_interfaces(pod, tag, wiring) if i.tag == tag]
        if len(found) != 1:
            return [f"expected one VPP interface tagged {tag!r}, found {len(found)}"]
        itf = found[0]
        problems = self.mode.problems(pod, itf.sw_if_index, wiring)
        problems += self._interface_problems(pod, wiring, itf, objs.gateway_sw_if_index)
        problems += self._route_problems(pod, itf.sw_if_index, wiring.pod_mac)
        return problems

    def check_many(self, pods: Sequence[tuple[PodNetwork, Wiring]]) -> list[list[str]]:
        """`check` pod by pod: each asks VPP about its own pod only (name filter, exact route
        lookup), so a batch would save no dump here."""
        return [self.check(pod, wiring) for pod, wiring in pods]

    def _interface_problems(
        self, pod: PodNetwork, wiring: Wiring, itf: interfaces.VppInterface, gateway: int
    ) -> list[str]:
        out = []
        recorded = wiring.extra.get("sw_if_index")
        if recorded is not None and recorded != str(itf.sw_if_index):
            out.append(f"VPP interface is sw_if_index {itf.sw_if_index}, record says {recorded}")
        if itf.mac != wiring.gateway_mac:
            out.append(f"VPP interface MAC {itf.mac} != gateway MAC {wiring.gateway_mac}")
        if not itf.admin_up:
            out.append(f"VPP interface {itf.name} is down")
        for ipv6 in sorted({a.version == 6 for a in pod.addresses}):
            table = interfaces.get_table(self.api, itf.sw_if_index, ipv6)
            if table != self.cfg.pod_vrf_id:
                out.append(f"VPP interface {itf.name} is in table {table}, not the pod VRF")
        if interfaces.unnumbered_to(self.api, itf.sw_if_index) != gateway:
            out.append(f"VPP interface {itf.name} is not unnumbered to the gateway loopback")
        return out

    def _route_problems(self, pod: PodNetwork, sw_if_index: int, pod_mac: str) -> list[str]:
        out = []
        neigh = neighbors.dump(self.api, sw_if_index)
        for addr in pod.addresses:
            host = ipaddress.ip_network(f"{addr.ip}/{addr.max_prefixlen}")
            route = ip.route(self.api, self.cfg.pod_vrf_id, host)
            if route is None or route.sw_if_indexes != (sw_if_index,):
                out.append(f"VPP route {host} via sw_if_index {sw_if_index} is missing")
            if neigh.get((sw_if_index, str(addr.ip))) != pod_mac:
                out.append(f"VPP neighbor {addr.ip} -> {pod_mac} is missing")
        return out

    def tag(self, key: PodKey) -> str:
        return names.pod_tag(key)

    def remove_orphan(self, name: str) -> None:
        """Removes a tagged VPP interface no record explains, whichever mode created it, or
        a pod-tagged veth host end of ours that VPP has no interface on (`owned()`)."""
        self._ensure()
        itf = interfaces.by_name(self.api, name)
        if itf is None and name in self.links.ours():
            itf = interfaces.by_name(self.api, afpacket.vpp_name(name))  # untagged: half-made
            if itf is None:
                self.links.delete(name)
                return
        if itf is None:
            return
        sw = itf.sw_if_index
        for (nsw, nip), mac in neighbors.dump(self.api, sw).items():
            neighbors.delete(self.api, nsw, ipaddress.ip_address(nip), mac)
        for ipv6 in (False, True):
            for dst, route in ip.routes(self.api, self.cfg.pod_vrf_id, ipv6).items():
                if sw in route.sw_if_indexes:
                    ip.delete_route(self.api, self.cfg.pod_vrf_id, dst)
        if sw in tap.dump(self.api):
            tap.delete(self.api, sw)
            return
        for host, host_sw in afpacket.dump(self.api).items():
            if host_sw == sw:
                afpacket.delete(self.api, host)
                self.links.delete(host)

    def owned(self) -> dict[str, str]:
        """Pod-tagged VPP interfaces, and the pod-tagged veth host ends of ours VPP has no
        interface on (an agent killed between the veth and VPP's interface; a pod whose VPP
        interface went with a VPP restart). Links are found by their alias, and only with
        this driver's name prefix: another agent on the node's namespace keeps its own."""
        self._ensure()
        found = {
            i.name: i.tag
            for i in interfaces.dump(self.api)
            if i.tag.startswith(names.POD_TAG_PREFIX)
        }
        retired = self.veth.reaper.names()  # a DEL's veth on its way out is nobody's orphan
        for link, tag in self.links.ours().items():
            if afpacket.vpp_name(link) not in found and link not in retired:
                found[link] = tag
        return found

"""Wiring mode veth + AF_PACKET: a veth pair (host end in the node namespace, peer in the pod)
and VPP bound to the host end with an AF_PACKET socket (`host-vswp<N>` in VPP).

Works on every kernel (no /dev/vhost-net needed); costs a kernel hop compared with TAP v2.

The host end's name comes from a small reused set (agent/dataplane/vpp/podlinks: VPP keeps
strings per interface name forever); the pod's record keeps it (`host_ifname`), and without a
record the link is found by its alias, the pod's tag. Records of older agents name a
`vsw<digest>` end (names.digest_host_ifname): found the same ways.

With a pool (`VppPodPool` > 0, agent/dataplane/vpp/podpool) an ADD takes a ready spare when
there is one and makes the pod's interface a macvlan on its waiting end, and a DEL hands the
pair to the pool's background deletes (`retire`); without a spare the pair is made here.

Removal order: VPP's AF_PACKET interface first, then the veth, and the veth only once VPP has
no binding on it. A veth that goes first leaves VPP polling a socket whose device is gone (VPP
26.06 logs `af_packet_fd_error: Network is down`, and under pod churn such sockets once made it
spin at 100 % CPU and stop answering its API). A VPP that does not answer may still hold the
socket, so then the veth stays: the DEL fails with 11 and its retry removes both in order.

Without the pool's retire, VPP's interface is deleted in the DEL (~4 ms with the kernel's
expedited grace periods, agent/linux/rcu), and the veth, set down, goes to a `LinkReaper` as the
kernel driver's do: the DEL answers without waiting for the kernel's ~20 ms unregister. Its name
stays held (as retired) until the link is gone, and an ADD into the same pod namespace settles
the namespace's pending deletes first (the pod's interface name is in use until then).
"""

from __future__ import annotations

import errno
import os

from agent.dataplane.undo import LinkReaper, UndoStack
from agent.dataplane.vpp import afpacket, interfaces, names
from agent.dataplane.vpp.api import VppApi, VppCallFailed
from agent.dataplane.vpp.modes import Port
from agent.dataplane.vpp.pairs import Reuse, Spare
from agent.dataplane.vpp.podlinks import PodLinks
from agent.dataplane.vpp.podpool import PodPool
from agent.infra import failpoints
from agent.linux import ethtool, netlink, nlwrite
from agent.linux.netns import PodNetns, describe, own_netns_fd, using
from agent.model.errors import DataplaneFailure, InvalidEnvironment
from agent.model.pod import PodNetwork, Wiring

IF_ALREADY_EXISTS = -79  # VNET_API_ERROR_IF_ALREADY_EXISTS: VPP still has host-<name>
ATTEMPTS = 8  # names tried by one ADD before it gives up (each refusal marks a name taken)


class VethAfPacket:
    name = "veth-afpacket"

    def __init__(
        self, api: VppApi, mtu: int, rings: afpacket.RingOptions, links: PodLinks,
        features_off: tuple[str, ...] = (), pool: PodPool | None = None,
    ) -> None:
        self.api = api
        self.mtu = mtu
        self.rings = rings
        self.links = links
        self.features_off = features_off  # VppConfig.pod_features_off
        self.pool = pool
        self.reaper = LinkReaper(delete=links.delete)  # DEL's veths, once VPP let go of them

    def check_usable(self) -> None:
        """AF_PACKET needs nothing beyond a kernel with veth support."""

    def create(self, pod: PodNetwork, tag: str, undo: UndoStack,
               netns: PodNetns | None = None) -> Port:
        self.reaper.settle(pod.netns)  # a DEL's veth still holding the pod's interface name
        if self.pool is not None:
            self.pool.settle(pod.netns)  # a DEL's macvlan, likewise
        spare = self.pool.take(self.api.generation) if self.pool is not None else None
        if spare is not None:
            return self._from_spare(pod, tag, spare, undo, netns)
        pod_mac = names.pod_mac(pod.key)
        vpp_mac = names.vpp_mac(pod.key)
        host, sw_if_index = self._link_and_bind(pod, tag, pod_mac, vpp_mac)
        undo.push(f"delete veth {host}", lambda: self.links.delete(host))
        undo.push(f"delete af_packet {host}", lambda: afpacket.delete(self.api, host))
        # Tagged by the first message of the driver's pipeline, so that even a half-wired
        # interface is found again by its owner (an untagged one by its veth's alias).
        return Port(sw_if_index, host, pod_mac, vpp_mac, tag=tag)

    def _from_spare(self, pod: PodNetwork, tag: str, spare: Spare, undo: UndoStack,
                    netns: PodNetns | None) -> Port:
        """The pod's interface made as a macvlan on the spare's waiting end, right inside the
        pod's namespace, in one batch with the pod's MAC (on the waiting end: a passthru
        macvlan takes its lower link's) and MTU; the host end tagged with the pod's tag. The
        pair stays in the node's namespace (podpool's docstring says why)."""
        assert self.pool is not None
        undo.push(f"destroy spare {spare.host}", lambda: self._destroy(spare))
        pod_mac = names.pod_mac(pod.key)
        mtu = pod.mtu or self.mtu
        resized = mtu if mtu != self.mtu else 0
        self.links.assign(spare.host, tag)
        with nlwrite.host_batch() as batch, using(pod.netns, netns) as held:
            batch.set_link(spare.host, mtu=resized, alias=tag)
            batch.set_link(index=spare.peer_index, mtu=resized, mac=pod_mac)
            batch.add_macvlan(pod.key.ifname, spare.peer_index, held.fd, mtu)
            try:
                batch.send()
            except OSError as exc:
                if getattr(exc, "what", "").startswith("creating macvlan") and \
                        exc.errno == errno.EEXIST:
                    raise InvalidEnvironment(
                        f"CNI_IFNAME {pod.key.ifname} already exists in CNI_NETNS {pod.netns}"
                    ) from exc
                raise DataplaneFailure(f"making {pod.key}'s interface on spare {spare.host}",
                                       describe(exc)) from exc
        return Port(spare.sw_if_index, spare.host, pod_mac, spare.vpp_mac,
                    prepared=mtu == self.mtu, tag=tag)

    def _destroy(self, spare: Spare) -> None:
        """A failed ADD's spare: VPP's interface, then the veth (wherever its end is)."""
        try:
            afpacket.delete(self.api, spare.host)
        finally:
            self.links.delete(spare.host)

    def retire(self, pod: PodNetwork, sw_if_index: int | None, wiring: Wiring | None,
               generation: int) -> None:
        """DEL with a pool: the waiting end set down (the pod's macvlan on it loses its link),
        the pair tagged retired and handed to the pool, which has it serve the next pod
        (`_reuse`) or deletes VPP's interface and then the veth in the background. VPP's
        interface is routeless already. A pair made by an earlier version (its waiting end
        moved into the pod) has that end taken back first. A pair of an older agent's name, or
        one whose end cannot be taken out of a living pod namespace, is removed here as
        without a pool; a name held for another tag is left."""
        host = self._host(pod, wiring)
        if host is None or self._anothers(pod, host):
            return
        peer = self.pool.peer_name(host) if self.pool is not None else None
        moved = peer is not None and not netlink.link_exists(peer)
        if self.pool is None or peer is None or (moved and not self._take_back(pod, peer)):
            self.remove(pod, sw_if_index, wiring)
            return
        if not netlink.link_exists(host):  # gone with its pod namespace before the DEL
            if sw_if_index is not None:
                afpacket.delete(self.api, host)
            self.links.delete(host)
            return
        with nlwrite.host_batch() as batch:
            batch.set_link(host, alias=names.RETIRED_TAG)
            if not moved:
                batch.set_link(peer, up=False)
            nlwrite.send(batch, f"tagging {host} retired")
        reuse = None if moved else self._reuse(pod, sw_if_index, wiring)
        self.pool.retire(host, generation if sw_if_index is not None else -1,
                         "" if moved else pod.netns, reuse)

    def _reuse(self, pod: PodNetwork, sw_if_index: int | None, wiring: Wiring | None
               ) -> Reuse | None:
        """What the pair needs to serve the next pod (agent/dataplane/vpp/pairs), the pod's
        namespace held open for it; None when it cannot: VPP's interface or its MAC unknown,
        the pod's own MTU on the pair, or the namespace gone (its macvlan with it)."""
        if sw_if_index is None or wiring is None or not wiring.gateway_mac or \
                (pod.mtu or self.mtu) != self.mtu:
            return None
        try:
            held = PodNetns.open(pod.netns)
        except InvalidEnvironment:
            return None
        return Reuse(held, pod.key.ifname, names.pod_mac(pod.key), sw_if_index,
                     wiring.gateway_mac)

    @staticmethod
    def _take_back(pod: PodNetwork, peer: str) -> bool:
        """Moves the pod's end out of its namespace as `peer`; True when it is out or there
        is nothing to move (no namespace, no such interface any more)."""
        try:
            held = PodNetns.open(pod.netns)
        except InvalidEnvironment:  # the namespace is gone, and the veth with it
            return True
        node = own_netns_fd()  # the node's
        try:
            with held, nlwrite.pod_batch(pod.netns, held) as batch:
                seq = batch.get_link(pod.key.ifname)
                index = batch.send()[seq].index
                batch.move_link(index, node, peer)
                batch.send()
        except OSError as exc:
            return exc.errno == errno.ENODEV
        finally:
            os.close(node)
        return True

    def _link_and_bind(self, pod: PodNetwork, tag: str, pod_mac: str, vpp_mac: str
                       ) -> tuple[str, int]:
        """The veth under the lowest free name and VPP's AF_PACKET interface on it: (name,
        sw_if_index). A name someone else holds is marked taken and the next one tried."""
        for _ in range(ATTEMPTS):
            host = self.links.reserve(tag)
            if not self._make_veth(pod, host, pod_mac, tag):
                continue
            try:
                return host, afpacket.create(self.api, host, vpp_mac, self.rings)
            except BaseException as exc:
                # No binding was made (or VPP does not answer: as before issue #27, the veth
                # goes; an ADD's undo never had VPP's interface to remove first).
                self.links.delete(host)
                if not (isinstance(exc, VppCallFailed) and exc.retval == IF_ALREADY_EXISTS):
                    raise
                # VPP kept an interface on an earlier link of this name: not ours to remove.
                self.links.taken(host)
        raise DataplaneFailure(f"no free veth host name for {pod.key} after {ATTEMPTS} tries",
                               f"names {self.links.prefix}<N> are taken by links not ours")

    def _make_veth(self, pod: PodNetwork, host: str, pod_mac: str, tag: str) -> bool:
        """The veth pair with host end `host`; False when that name was someone else's."""
        try:
            netlink.create_veth(host, pod.netns, pod.key.ifname, pod.mtu or self.mtu, pod_mac,
                                tag, replace=False)
        except DataplaneFailure as exc:
            if netlink.netlink_code(exc.__cause__ or exc) == errno.EEXIST:
                self.links.taken(host)
                return False
            self.links.release(host)
            raise
        except BaseException:
            self.links.release(host)
            raise
        if self.features_off:
            try:
                self._offloads_off(pod)
            except BaseException:
                self.links.delete(host)
                raise
        return True

    def _offloads_off(self, pod: PodNetwork) -> None:
        """The pod's kernel does itself what it would leave to the device (`features_off`):
        - IPv4 TSO (the node mesh): VPP 26.06 segments an IPv4 GSO packet read by AF_PACKET as
          if it were IPv6 (its GSO code takes the family from the IP-checksum offload flag,
          which AF_PACKET input never sets), so where VPP must segment before the VXLAN
          encapsulation, large IPv4 TCP packets would leave broken. IPv6 keeps its offload.
        - checksums (VPP's own WireGuard): the plugin encrypts a packet whose checksum offload
          is still pending, and the interconnect then writes that checksum into the ciphertext
          (docs/encryption.md). Without checksum offload the veth has no TSO either."""
        what = ", ".join(self.features_off)
        with netlink.translated(f"switching {what} off on {pod.key.ifname} in the pod"):
            for feature in self.features_off:
                ethtool.set_feature(pod.netns, pod.key.ifname, feature, False)

    def _host(self, pod: PodNetwork, wiring: Wiring | None) -> str | None:
        """The pod's host end: the record's, else the link tagged with the pod's tag, else an
        older agent's `vsw<digest>` end when it exists; None: the pod has no link."""
        if wiring is not None and wiring.host_ifname:
            return wiring.host_ifname
        found = self.links.name_of(names.pod_tag(pod.key))
        if found is not None:
            return found
        legacy = names.digest_host_ifname(pod.key)
        return legacy if netlink.link_exists(legacy) else None

    def adopt(self, pod: PodNetwork, tag: str, undo: UndoStack, wiring: Wiring) -> Port | None:
        """After a VPP restart the veth pair is still there (its pod end keeps the pod's
        addresses and routes): only VPP's AF_PACKET interface is made again, on the link the
        record names. None when the veth itself is gone."""
        host = self._host(pod, wiring)
        if host is None or not netlink.link_exists(host):
            return None
        vpp_mac = wiring.gateway_mac or names.vpp_mac(pod.key)  # a spare's MAC was random
        if interfaces.by_name(self.api, afpacket.vpp_name(host)) is not None:
            # A binding left in place (a damaged pod, not a restart). Asked blindly, a VPP
            # without one logs a warning for every pod it restores.
            afpacket.delete(self.api, host)
        sw_if_index = afpacket.create(self.api, host, vpp_mac, self.rings)
        undo.push(f"delete af_packet {host}", lambda: afpacket.delete(self.api, host))
        return Port(sw_if_index, host, wiring.pod_mac or names.pod_mac(pod.key), vpp_mac,
                    tag=tag)

    def _anothers(self, pod: PodNetwork, host: str) -> bool:
        """Whether the table holds name `host` for another tag than the pod's: a retried DEL's
        record may name a link that went and whose name a newer pod (or a spare) took, or one
        this pod's first DEL retired already. Such a name is left alone."""
        owner = self.links.owner(host)
        return owner is not None and owner != names.pod_tag(pod.key)

    def vpp_names(self, pod: PodNetwork, wiring: Wiring | None) -> list[str] | None:
        host = self._host(pod, wiring)
        return [] if host is None else [afpacket.vpp_name(host)]

    def remove(self, pod: PodNetwork, sw_if_index: int | None, wiring: Wiring | None) -> None:
        """VPP's interface now; the veth set down and handed to the reaper (see the
        docstring). A name held for another tag is left alone (`_anothers`)."""
        host = self._host(pod, wiring)
        if host is None or self._anothers(pod, host):
            return
        if sw_if_index is not None:
            # Raises when VPP refuses or does not answer: the veth stays (see the docstring).
            afpacket.delete(self.api, host)
            failpoints.hit("del:vpp-afpacket")
        if netlink.disable_link(host):
            self.links.assign(host, names.RETIRED_TAG)
            self.reaper.retire(host, pod.netns)
        else:  # gone with its pod namespace already: only the name to free
            self.links.delete(host)

    def problems(self, pod: PodNetwork, sw_if_index: int, wiring: Wiring) -> list[str]:
        host = self._host(pod, wiring)
        if host is None:
            return [f"no veth host end tagged {names.pod_tag(pod.key)}"]
        out = []
        if not netlink.link_exists(host):
            out.append(f"veth host end {host} is missing")
        itf = interfaces.by_name(self.api, afpacket.vpp_name(host))
        if itf is None or itf.dev_type != afpacket.DEV_TYPE or itf.sw_if_index != sw_if_index:
            out.append(f"VPP has no AF_PACKET interface on {host} as sw_if_index {sw_if_index}")
        return out

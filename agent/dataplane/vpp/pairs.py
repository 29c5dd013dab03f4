"""The pod pool's pairs (agent/dataplane/vpp/podpool): what a spare is, how one is made, and how
a DEL's pair serves the next pod instead of being deleted and made again.

A pod made from a spare has a macvlan on the pair's waiting end, inside its namespace; the pair
itself, and VPP's AF_PACKET interface on it, never leave the node's namespace. So after a DEL
(VPP's routes and neighbors of the pod gone, the waiting end down) the pair is a spare again as
soon as the macvlan is gone: no `af_packet_create_v3` and no `af_packet_delete`, each of which
holds VPP's only API thread for three RCU grace periods (~43 ms with normal ones).

The DEL holds the pod's namespace open (`Reuse.netns`), so the macvlan is still there when the
pool's loop comes to it, even if the runtime has removed the namespace's path meanwhile: the
loop deletes it there (synchronously, the waiting end is free afterwards) and lets go of the
namespace. A link of that name that is not the pod's macvlan (another MAC) is left alone, and
the pair is deleted instead.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from dataclasses import dataclass

from agent.dataplane.vpp import afpacket, interfaces, names
from agent.dataplane.vpp.api import VppApi
from agent.dataplane.vpp.config import VppConfig
from agent.dataplane.vpp.podlinks import PodLinks
from agent.linux import ethtool, netlink, nlwrite
from agent.linux.netns import PodNetns
from agent.model.errors import CniError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolSettings:
    size: int  # spares kept ready (VppPodPool); 0: no spares (retired pairs still go here)
    spare_prefix: str  # the waiting ends' names: this plus the host end's number
    mtu: int
    rings: afpacket.RingOptions
    pod_vrf_id: int
    families: tuple[bool, ...]  # ipv6 flags of the node's pod families
    # offloads the waiting end switches off (VppConfig.pod_features_off): IPv4 TSO with the
    # node mesh (it segments the pods' IPv4 TCP), checksums with VPP's own WireGuard
    features_off: tuple[str, ...] = ()

    @classmethod
    def of(cls, config: VppConfig) -> PoolSettings | None:
        """The pool `config` asks for; None for none (`VppPodPool` 0, TAP mode)."""
        if not config.pod_pool or config.use_tap:
            return None
        families = tuple(sorted({g.version == 6 for g in config.pod_gateways}))
        return cls(config.pod_pool, config.spare_link_prefix, config.mtu, config.afpacket,
                   config.pod_vrf_id, families, config.pod_features_off)


def settle_waiting_ends(prefix: str, features_off: tuple[str, ...]) -> list[str]:
    """The waiting ends made before (spares', and the lower links of pods' macvlans:
    `<prefix><N>`) switched as new ones are: a node whose config now switches offloads off
    (VPP's own WireGuard turned on) has pods made without that. Returns what it switched."""
    switched = []
    for name in netlink.link_names_with_prefix(prefix):
        for feature in features_off:
            with netlink.translated(f"switching {feature} off on {name}"):
                if ethtool.feature(None, name, feature):
                    ethtool.set_feature(None, name, feature, False)
                    switched.append(f"{name} {feature}")
    if switched:
        log.info("pods made before: offloads switched off on their waiting ends (%s)",
                 ", ".join(switched))
    return switched


def macvlans_work(size: int) -> bool:
    """Whether the pool's pods can be macvlans (CONFIG_MACVLAN), asked of the kernel when the
    driver starts (not when one is only made: `--teardown` makes one and creates no link).
    False is logged: the pool of `size` is ignored, pods are made as with `VppPodPool` 0."""
    if netlink.macvlan_supported():
        return True
    log.warning("this kernel makes no macvlan links (CONFIG_MACVLAN): VppPodPool %d is "
                "ignored, pods are made as with VppPodPool 0", size)
    return False


@dataclass(frozen=True)
class Spare:
    """A ready pair: host end `host` in VPP as `sw_if_index`, waiting end `peer` (index
    `peer_index`) up in the node's namespace; made on VPP connection `generation`."""

    host: str
    peer: str
    peer_index: int
    sw_if_index: int
    vpp_mac: str
    generation: int


@dataclass(frozen=True)
class Reuse:
    """What a DEL's pair needs to serve again: the pod's namespace (held open), the pod's
    macvlan in it (`ifname`, MAC `pod_mac`), VPP's interface and its MAC."""

    netns: PodNetns
    ifname: str
    pod_mac: str
    sw_if_index: int
    vpp_mac: str


def new_spare(api: VppApi, links: PodLinks, cfg: PoolSettings, host: str, peer: str,
              gateway: int, retire: Callable[[str, int], None]) -> Spare:
    """A new pair under the reserved host name `host`, VPP's AF_PACKET interface on it, ready
    for a pod (podpool's docstring). On failure nothing is left, or, once VPP has the
    interface, the pair is handed to `retire` (host, generation) for the deletes."""
    generation = api.generation
    try:
        _, peer_index = nlwrite.add_local_pair(host, peer, cfg.mtu, names.SPARE_TAG)
    except BaseException:
        links.release(host)
        raise
    if cfg.features_off:
        try:
            with netlink.translated(f"switching {', '.join(cfg.features_off)} off on {peer}"):
                for feature in cfg.features_off:
                    ethtool.set_feature(None, peer, feature, False)
        except BaseException:
            links.delete(host)
            raise
    mac = names.random_mac()
    try:
        sw = afpacket.create(api, host, mac, cfg.rings)
    except BaseException:
        links.delete(host)  # no binding was made
        raise
    try:
        interfaces.set_tag(api, sw, names.SPARE_TAG)
        for ipv6 in cfg.families:
            interfaces.set_table(api, sw, cfg.pod_vrf_id, ipv6)
        interfaces.set_unnumbered(api, sw, gateway)
        interfaces.set_mtu(api, sw, cfg.mtu)
        interfaces.set_admin_up(api, sw)
    except BaseException:
        retire(host, generation)
        raise
    return Spare(host, peer, peer_index, sw, mac, generation)


def spare_again(api: VppApi, links: PodLinks, host: str, peer: str, reuse: Reuse,
               generation: int) -> Spare | None:
    """Pair `host` (retired, waiting end `peer`) as a spare again: the pod's macvlan deleted,
    the waiting end up, both tags back to spare. None when it cannot serve (its macvlan is not
    where the DEL left it, or a request failed): the caller deletes the pair. Lets go of the
    namespace either way."""
    try:
        with reuse.netns, nlwrite.pod_batch(reuse.netns.path, reuse.netns) as batch:
            seq = batch.get_link(reuse.ifname)
            try:
                found: nlwrite.Link | None = batch.send()[seq]
            except OSError as exc:
                if exc.errno != errno.ENODEV:
                    raise
                found = None  # gone already: the waiting end is free
            if found is not None:
                if found.mac != reuse.pod_mac:
                    return None  # not the pod's macvlan: nothing of ours to delete
                batch.delete_link(reuse.ifname)
                batch.send()
        with nlwrite.host_batch() as batch:
            batch.set_link(host, alias=names.SPARE_TAG)
            batch.set_link(peer, up=True)
            seq = batch.get_link(peer)
            peer_index = batch.send()[seq].index
        interfaces.set_tag(api, reuse.sw_if_index, names.SPARE_TAG)
    except (OSError, CniError):
        return None
    links.assign(host, names.SPARE_TAG)
    return Spare(host, peer, peer_index, reuse.sw_if_index, reuse.vpp_mac, generation)

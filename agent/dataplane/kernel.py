"""Kernel dataplane: Linux routing in the agent's own namespace, for nodes and tests without VPP.

Each pod gets a veth pair: the peer is created directly inside the pod netns under the name the
runtime asked for, the host end (host_prefix + a digest of the pod key, at most 15 bytes) stays in
the node namespace with host routes to the pod's /32 and /128 addresses. The host end carries the
owner tag `vswitch-cni:<container_id>:<ifname>` as its IFLA_IFALIAS so a restarted agent finds
its links again (`owned`). The pod's gateway addresses live on one gateway interface (a dummy, or
an ifb where the kernel has no dummy driver) so pods can ping their gateway, and the connected
node-subnet route on it sends traffic to unassigned pod addresses nowhere; the pod resolves its
gateway to the MAC of its own host veth end (a permanent neighbor set by agent/linux/pod_netns).

"Host namespace" is the network namespace of the calling thread (see agent/linux/netns): the
agent runs in the node's, tests run the driver in a thread that entered a test node namespace.
An ADD's pod namespace comes opened and checked (agent/linux/netns.PodNetns): the peer is created
in it by its fd.

DEL disables the host end (down: its routes go, the pod end loses its carrier) and leaves the
slow delete of the pair to a background worker (agent/dataplane/undo); an ADD first settles a
pending delete of its host name or of a link in its namespace, so it never meets a dying link.

Thread-safety: no state is shared between pods but the reaper's queue; every call opens its own
netlink sockets, so attach/detach for different pods run in parallel. `start` is serialized by
a lock.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence

from agent.dataplane.undo import LinkReaper, UndoStack
from agent.linux import netlink, nlread, nlwrite
from agent.linux.netns import PodNetns, using
from agent.linux.nlcodec import RT_SCOPE_LINK
from agent.model.errors import InvalidConfig
from agent.model.pod import IPInterface, PodKey, PodNetwork, Wiring

OWNER_PREFIX = "vswitch-cni:"
IFNAMSIZ = 15
DIGEST_LEN = 11


ALIAS_MAX = 254  # IFLA_IFALIAS: at most IFALIASZ - 1 = 255 bytes, and the NUL is sent too


def mac_from_key(key: PodKey) -> str:
    """A deterministic, locally administered unicast MAC for an attachment (the pod's end)."""
    raw = bytearray(hashlib.sha256(f"mac\0{key.container_id}\0{key.ifname}".encode()).digest()[:6])
    raw[0] = (raw[0] & 0xFC) | 0x02  # clear multicast bit, set locally administered bit
    return ":".join(f"{b:02x}" for b in raw)


def owner_tag(pod: PodNetwork) -> str:
    return key_tag(pod.key)


def key_tag(key: PodKey) -> str:
    """`vswitch-cni:<container_id>:<ifname>`; a tag over the alias limit (the spec allows IDs of
    any length) keeps the ID's head and a hash of the whole key, as the VPP tags do."""
    tag = f"{OWNER_PREFIX}{key.container_id}:{key.ifname}"
    if len(tag.encode()) <= ALIAS_MAX:
        return tag
    suffix = f"~{key.digest(16)}:{key.ifname}"
    room = ALIAS_MAX - len(OWNER_PREFIX) - len(suffix.encode())
    return f"{OWNER_PREFIX}{key.container_id[:room]}{suffix}"


class KernelDataplane:
    """The `Dataplane` protocol on Linux routing."""

    name = "kernel"

    def __init__(
        self,
        gateways: Sequence[IPInterface],
        mtu: int,
        gateway_ifname: str = "vswitch0",
        host_prefix: str = "vsw",
        reap_delay: float = 0.0,
    ) -> None:
        if not 0 < len(gateway_ifname) <= IFNAMSIZ:
            raise InvalidConfig(f"gateway_ifname {gateway_ifname!r}: 1 to {IFNAMSIZ} bytes")
        if len(host_prefix) + DIGEST_LEN > IFNAMSIZ:
            raise InvalidConfig(
                f"host_prefix {host_prefix!r}: at most {IFNAMSIZ - DIGEST_LEN} bytes"
            )
        if not 68 <= mtu <= 65535:
            raise InvalidConfig(f"mtu {mtu}: must be within 68..65535")
        self.gateways = tuple(gateways)
        self.mtu = mtu
        self.gateway_ifname = gateway_ifname
        self.host_prefix = host_prefix
        self._start_lock = threading.Lock()
        self._started = False
        self.reaper = LinkReaper(reap_delay)

    def host_ifname(self, pod: PodNetwork) -> str:
        return self.host_prefix + pod.key.digest(DIGEST_LEN)

    # --- node-wide ---------------------------------------------------------------------------

    def start(self) -> None:
        with self._start_lock:
            with netlink.host_session() as links, netlink.translated(
                "setting up the gateway interface"
            ):
                index = links.ifindex(self.gateway_ifname)
                if index is None:
                    index = links.add_dummy(self.gateway_ifname)
                for gw in self.gateways:
                    links.add_address(index, gw)
                links.set_link(index, up=True)
            netlink.enable_forwarding({gw.version for gw in self.gateways})
            self._started = True

    def ready(self) -> bool:
        if not self._started:
            return False
        try:
            return netlink.link_exists(self.gateway_ifname)
        except Exception:  # readiness is a yes/no probe, never an error
            return False

    def close(self) -> None:
        """Finishes the pending deletes of retired links; sockets are per call. Pods stay
        wired."""
        self.reaper.drain()

    def pending_link_deletes(self) -> int:
        return self.reaper.pending()

    # --- per pod -----------------------------------------------------------------------------

    def attach(
        self, pod: PodNetwork, undo: UndoStack, netns: PodNetns | None = None
    ) -> Wiring:
        host = self.host_ifname(pod)
        self.reaper.settle(pod.netns, host)  # a DEL's link holding our names goes first
        pod_mac = mac_from_key(pod.key)
        mtu = pod.mtu or self.mtu
        # Two round trips on one host socket (agent/linux/nlwrite): the pair, then its routes; the
        # pod end stays down until agent/linux/pod_netns configures it (one socket inside the pod).
        with nlwrite.host_batch() as batch, using(pod.netns, netns) as held:
            index, host_mac = nlwrite.add_veth(
                batch, host, held, pod.key.ifname, mtu, pod_mac, owner_tag(pod)
            )
            undo.push(f"delete veth {host}", lambda: nlwrite.delete_link(host))
            for iface in pod.addresses:
                batch.replace_route(str(iface.ip), iface.max_prefixlen, index, scope=RT_SCOPE_LINK)
                dst = f"{iface.ip}/{iface.max_prefixlen}"
                undo.push(f"delete route {dst}", _route_deleter(dst, index))
            nlwrite.send(batch, f"routing {pod.key} via {host}")
        return Wiring(host_ifname=host, pod_mac=pod_mac, gateway_mac=host_mac)

    def detach(self, pod: PodNetwork, wiring: Wiring | None) -> None:
        # Down, the host end carries nothing (the kernel drops its routes, the pod end loses
        # its carrier); deleting the pair (which takes the pod's end with it) can wait.
        host = wiring.host_ifname if wiring else self.host_ifname(pod)
        if netlink.disable_link(host):
            self.reaper.retire(host, pod.netns)

    def check(self, pod: PodNetwork, wiring: Wiring) -> list[str]:
        host = wiring.host_ifname
        with netlink.host_reader() as nl, netlink.translated(f"checking {host}"):
            return self._problems(nl, pod, wiring, nl.link(host))

    def check_many(self, pods: Sequence[tuple[PodNetwork, Wiring]]) -> list[list[str]]:
        """`check` of many pods on one socket: one dump of the host's links instead of a
        lookup per pod, then the same comparisons (reconcile after a restart)."""
        with netlink.host_reader() as nl, netlink.translated("checking the pods' host interfaces"):
            links = {link.name: link for link in nl.links()}
            return [
                self._problems(nl, pod, wiring, links.get(wiring.host_ifname))
                for pod, wiring in pods
            ]

    def _problems(
        self, nl: nlread.Reader, pod: PodNetwork, wiring: Wiring, link: nlread.Link | None
    ) -> list[str]:
        host = wiring.host_ifname
        if link is None:
            return [f"host interface {host} missing"]
        problems = _link_problems(link, host, owner_tag(pod), pod.mtu or self.mtu)
        if link.mac.lower() != wiring.gateway_mac.lower():
            problems.append(f"host interface {host} MAC differs from the pod's gateway MAC")
        # One kernel route lookup per address (a dump of the routing table per pod made
        # reconcile quadratic in the node's pod count): traffic to the pod must leave
        # through its host end.
        for iface in pod.addresses:
            try:
                found = nl.route_to(iface.ip)
            except OSError:  # no route at all (unreachable, prohibited)
                found = None
            if found is None or found.oif != link.index:
                problems.append(f"route {iface.ip}/{iface.max_prefixlen} via {host} missing")
        return problems

    def restore(self, pod: PodNetwork, wiring: Wiring) -> Wiring | None:
        """A kernel veth cannot be re-created without the pod's end: always from scratch."""
        return None

    def generation(self) -> int:
        return 0  # the kernel never forgets routes and links behind the agent's back

    def tag(self, key: PodKey) -> str:
        return key_tag(key)

    def remove_orphan(self, name: str) -> None:
        # Host routes go with the link.
        netlink.delete_link(name)

    def owned(self) -> dict[str, str]:
        retired = self.reaper.names()  # a DEL's link on its way out is nobody's orphan
        with netlink.host_reader() as nl, netlink.translated("listing links"):
            return {
                link.name: link.alias
                for link in nl.links()
                if link.alias and link.alias.startswith(OWNER_PREFIX)
                and link.name.startswith(self.host_prefix) and link.name not in retired
            }


def _route_deleter(dst: str, index: int) -> Callable[[], None]:
    def undo() -> None:
        with netlink.host_session() as links:
            links.delete_route(dst, index)  # gone already (with its link): fine

    return undo


def _link_problems(link: nlread.Link, host: str, tag: str, mtu: int) -> list[str]:
    problems: list[str] = []
    if link.alias != tag:
        problems.append(f"host interface {host} owner tag is {link.alias!r}, not {tag!r}")
    if link.operstate != "UP":
        problems.append(f"host interface {host} is {link.operstate}, not UP")
    if link.mtu != mtu:
        problems.append(f"host interface {host} has MTU {link.mtu}, expected {mtu}")
    return problems

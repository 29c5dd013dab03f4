"""The pod side of a wiring: addresses, gateway neighbor, routes and MTU inside the pod netns.

The same for every dataplane driver: the driver has created the interface `pod.key.ifname` inside
`pod.netns` and tells us the MAC the pod's gateway must resolve to (the host veth end, or VPP's
interface). The gateway gets a permanent neighbor entry, so the pod never ARPs/NDPs for it and the
vswitch need not answer; the gateway is reached through a link-scope route, which lets a /32 or
/128 pod address have a gateway outside its own (empty) subnet; the default route goes via it.

`configure` uses replace semantics so a retried ADD converges; `remove` undoes it and is
idempotent (a namespace or interface that is already gone is success). Netlink failures are
`PodSideFailure`; a bad CNI_NETNS is `InvalidEnvironment` (from agent/linux/netns). An ADD hands
`configure` the namespace it holds open (agent/linux/netns.PodNetns): the batch goes out on the
request's socket in it, made once.
"""

from __future__ import annotations

import errno
import re
import socket
from collections.abc import Iterator

from agent.linux import nlread, nlwrite
from agent.linux.iproute import Session
from agent.linux.netlink import describe, pod_reader, translated
from agent.linux.netns import PodNetns
from agent.linux.nlcodec import IFA_F_NODAD, IFF_UP, NUD_PERMANENT, RT_SCOPE_LINK, RT_TABLE_MAIN
from agent.model.errors import InternalError, InvalidEnvironment, PodSideFailure
from agent.model.pod import IPAddress, PodNetwork

LOOPBACK_INDEX = 1
_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")


def _default(addr: IPAddress) -> str:
    return "0.0.0.0/0" if addr.version == 4 else "::/0"


def _host_prefix(addr: IPAddress) -> int:
    return 32 if addr.version == 4 else 128


def configure(pod: PodNetwork, gateway_mac: str, netns: PodNetns | None = None) -> str:
    """Configures the pod's interface; returns its MAC. `netns`: the pod's namespace when the
    caller holds it open already (an ADD), else it is opened here."""
    if not _MAC.fullmatch(gateway_mac):  # it comes from the driver: a bad one is our bug
        raise InternalError(f"gateway_mac {gateway_mac!r} from the dataplane is not a MAC")
    name = pod.key.ifname
    with nlwrite.pod_batch(pod.netns, netns) as batch:
        seq = batch.get_link(name)
        try:
            link = batch.send()[seq]
        except OSError as exc:
            if exc.errno == errno.ENODEV:
                raise PodSideFailure(f"interface {name} missing in {pod.netns}") from exc
            raise PodSideFailure(f"reading {name} in the pod", describe(exc)) from exc
        # Everything else in one round trip, in this order (the kernel runs a batch's requests
        # one after the other): lo (always index 1 in a namespace) and the interface up with
        # its MTU, the addresses, then per gateway the permanent neighbor and the routes.
        batch.set_link(index=LOOPBACK_INDEX, up=True)
        batch.set_link(index=link.index, up=True, mtu=pod.mtu)
        for iface in pod.addresses:
            flags = IFA_F_NODAD if iface.version == 6 else 0
            batch.add_address(link.index, str(iface.ip), iface.network.prefixlen, flags)
        for gateway in pod.gateways:
            _route_via(batch, link.index, gateway, gateway_mac)
        nlwrite.send(batch, f"configuring {name} in the pod", PodSideFailure)
        return link.mac


def _route_via(batch: nlwrite.Batch, index: int, gateway: IPAddress, gateway_mac: str) -> None:
    batch.replace_neighbor(index, str(gateway), gateway_mac)
    # Each attachment's routes carry its own metric (its interface index), so a second
    # interface of the same pod (same gateway, other device) adds routes next to the first
    # one's instead of replacing them; the older interface keeps the lower metric and so the
    # default route, and deleting either leaves the other's routes in place.
    plen = _host_prefix(gateway)
    batch.replace_route(str(gateway), plen, index, scope=RT_SCOPE_LINK, priority=index)
    batch.replace_route(_default(gateway).split("/")[0], 0, index, gateway=str(gateway),
                        priority=index)


def check(pod: PodNetwork, gateway_mac: str, pod_mac: str) -> list[str]:
    """What is wrong with the pod side, in words; empty when all is as configured.

    Four netlink requests on one socket made in the pod namespace (the link by name, then dumps
    of addresses, neighbors and routes, tiny in a pod), read by agent/linux/nlread: reconcile runs
    this for every live pod, and pyroute2's message objects cost several times the kernel's work."""
    try:
        with pod_reader(pod.netns) as nl, translated("reading the pod netns", PodSideFailure):
            link = nl.link(pod.key.ifname)
            if link is None:
                return [f"interface {pod.key.ifname} missing in {pod.netns}"]
            return list(_problems(nl, link, pod, gateway_mac, pod_mac))
    except InvalidEnvironment as exc:
        return [f"netns: {exc}"]


def _problems(
    nl: nlread.Reader, link: nlread.Link, pod: PodNetwork, gateway_mac: str, pod_mac: str
) -> Iterator[str]:
    name = pod.key.ifname
    if not link.flags & IFF_UP:
        yield f"interface {name} is down"
    if link.mtu != pod.mtu:
        yield f"interface {name} has MTU {link.mtu}, expected {pod.mtu}"
    if pod_mac and link.mac.lower() != pod_mac.lower():
        yield f"interface {name} has MAC {link.mac}, expected {pod_mac}"
    have = {(a.address, a.prefixlen) for a in nl.addresses() if a.index == link.index}
    for iface in pod.addresses:
        if (iface.ip, iface.network.prefixlen) not in have:
            yield f"address {iface} missing on {name}"
    if not pod.gateways:
        return
    neighbors = [n for n in nl.neighbors(socket.AF_UNSPEC) if n.index == link.index]
    routes = [r for r in nl.routes(socket.AF_UNSPEC, RT_TABLE_MAIN) if r.oif == link.index]
    for gateway in pod.gateways:
        yield from _gateway_problems(neighbors, routes, name, gateway, gateway_mac)


def _gateway_problems(
    neighbors: list[nlread.Neighbor],
    routes: list[nlread.Route],
    name: str,
    gateway: IPAddress,
    gateway_mac: str,
) -> Iterator[str]:
    neigh = [n for n in neighbors if n.dst == gateway]
    if not neigh:
        yield f"neighbor {gateway} missing on {name}"
    elif str(neigh[0].lladdr).lower() != gateway_mac.lower():
        yield f"neighbor {gateway} is {neigh[0].lladdr}, expected {gateway_mac}"
    elif not neigh[0].state & NUD_PERMANENT:
        yield f"neighbor {gateway} is not permanent"
    plen = _host_prefix(gateway)
    if not any(_is_route(r, gateway, plen, None) for r in routes):
        yield f"route to gateway {gateway}/{plen} via {name} missing"
    if not any(_is_route(r, None, 0, gateway) for r in routes):
        yield f"default route via {gateway} missing"


def _is_route(
    route: nlread.Route, dst: IPAddress | None, plen: int, gateway: IPAddress | None
) -> bool:
    # dst or gateway is set: an IPv4 address never equals an IPv6 one, so families stay apart
    return route.dst_len == plen and route.dst == dst and route.gateway == gateway


def remove(pod: PodNetwork) -> None:
    """Undoes `configure` (routes, neighbors, addresses, link down). Idempotent."""
    try:
        with Session.pod(pod.netns) as links, translated(
            f"cleaning {pod.key} in the pod", PodSideFailure
        ):
            index = links.ifindex(pod.key.ifname)
            if index is None:
                return
            for gateway in pod.gateways:
                _forget_gateway(links, index, gateway)
            for iface in pod.addresses:
                links.delete_address(index, iface)
            links.set_link(index, up=False)
    except InvalidEnvironment:
        return  # the namespace is gone: nothing of the pod side is left


def _forget_gateway(links: Session, index: int, gateway: IPAddress) -> None:
    links.delete_route(_default(gateway), index, family=_family(gateway))
    links.delete_route(f"{gateway}/{_host_prefix(gateway)}", index, family=_family(gateway))
    links.delete_neighbor(index, str(gateway))


def _family(addr: IPAddress) -> int:
    return socket.AF_INET if addr.version == 4 else socket.AF_INET6

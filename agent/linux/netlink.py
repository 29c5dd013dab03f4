"""Netlink for the slow paths of the agent: pyroute2 sessions and raw readers per namespace, the
host's links, and the translation of netlink errors into ours (no shell-outs).

Here pyroute2's NetlinkError and the OSErrors of raw netlink become `agent.model.errors`: a
refused netlink request is the error class the caller names (`DataplaneFailure` on the host side,
`PodSideFailure` inside the pod), cause chained; the batches of an ADD's hot path are translated
the same way by agent/linux/nlwrite.send (re-exported here with the batch helpers, the veth pair
and the host link lookups, so the slow paths find everything in one place). A netns path the
runtime gave that does not exist or is no pod's network namespace is already
`InvalidEnvironment` naming CNI_NETNS when agent/linux/netns opens it.

"Host" is the calling thread's own namespace (see agent/linux/netns). Every helper opens its own
short-lived socket or pyroute2 session (an `IPRoute` must stay in the thread that made it); an
ADD's pod namespace comes as the request's `PodNetns`, opened once.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

from pyroute2 import NetlinkError

from agent.linux import nlread
from agent.linux.iproute import Session
from agent.linux.netns import PodNetns, own_netns_fd
from agent.linux.nlwrite import add_veth as add_veth
from agent.linux.nlwrite import delete_link as delete_link
from agent.linux.nlwrite import host_batch as host_batch
from agent.linux.nlwrite import host_socket
from agent.linux.nlwrite import link_exists as link_exists
from agent.linux.nlwrite import pod_batch as pod_batch
from agent.linux.nlwrite import send as send
from agent.model.errors import CniError, DataplaneFailure


def netlink_code(exc: BaseException) -> int | None:
    """The errno of a NetlinkError (pyroute2 keeps it in `.code`) or an OSError."""
    if isinstance(exc, NetlinkError):
        return int(exc.code)
    if isinstance(exc, OSError):
        return exc.errno
    return None


def describe(exc: BaseException) -> str:
    """A short human text for a library error: the errno name and message when there is one."""
    code = netlink_code(exc)
    if code:
        return f"{errno.errorcode.get(code, code)}: {os.strerror(code)}"
    return str(exc) or type(exc).__name__


@contextmanager
def translated(what: str, error: type[CniError] = DataplaneFailure) -> Iterator[None]:
    """Turns NetlinkError/OSError raised inside the block into `error(what, <errno text>)`."""
    try:
        yield
    except CniError:
        raise
    except (NetlinkError, OSError) as exc:
        raise error(what, describe(exc)) from exc


# ---- sessions and reads ----------------------------------------------------------------------


@contextmanager
def host_session() -> Iterator[Session]:
    """A pyroute2 session (agent/linux/iproute) in the calling thread's namespace."""
    with translated("netlink socket"):
        session = Session.host()
    with session:
        yield session


@contextmanager
def host_reader() -> Iterator[nlread.Reader]:
    """Raw reads (agent/linux/nlread) in the calling thread's namespace (the node's)."""
    with host_socket() as sock:
        yield nlread.Reader(sock)


@contextmanager
def pod_reader(netns_path: str) -> Iterator[nlread.Reader]:
    """Raw reads inside the pod namespace at `netns_path`."""
    with PodNetns.open(netns_path) as netns:
        yield nlread.Reader(netns.route_socket())


# ---- the host's links -------------------------------------------------------------------------


def create_veth(
    host_ifname: str, pod_netns: str, pod_ifname: str, mtu: int, pod_mac: str | None, alias: str,
    replace: bool = True,
) -> tuple[int, str]:
    """Creates a veth pair, the peer directly in `pod_netns` as `pod_ifname`; both ends up.

    The host end carries `alias` (IFLA_IFALIAS, the owner tag). Returns the host end's index
    and MAC. On failure nothing of the pair is left behind. `replace`: see nlwrite.add_veth.
    """
    with PodNetns.open(pod_netns) as netns:
        with host_batch() as batch:
            index, mac = add_veth(batch, host_ifname, netns, pod_ifname, mtu, pod_mac, alias,
                                  replace)
        try:
            with pod_batch(pod_netns, netns) as pod:
                pod.set_link(pod_ifname, up=True)
                send(pod, f"bringing {pod_ifname} up in the pod")
        except BaseException:
            delete_link(host_ifname)
            raise
    return index, mac


_PROBE_HOST = re.compile(r"vswmh[0-9a-f]{8}")  # macvlan_supported's throwaway pair


def macvlan_supported() -> bool:
    """Whether the kernel makes passthru macvlans (CONFIG_MACVLAN): a throwaway veth pair in the
    calling thread's namespace gets one, and the pair takes it along when it goes. False only
    when the kernel says it has no such kind of link (EOPNOTSUPP); any other refusal raises.
    A pair an earlier probe left (its agent killed in between) goes first."""
    with host_reader() as reader:
        for link in reader.links():
            if _PROBE_HOST.fullmatch(link.name):
                delete_link(link.name)  # its peer and any macvlan on it go along
    token = secrets.token_hex(4)
    host, peer, probe = (f"vswm{role}{token}" for role in "hpm")
    with host_batch() as batch:
        batch.add_veth(host, 1500, peer, None, None)
        seq = batch.get_link(peer)
        links = send(batch, f"creating veth {host} <-> {peer}")
        own = own_netns_fd()
        try:
            batch.add_macvlan(probe, links[seq].index, own, 1500)
            send(batch, f"creating macvlan {probe}")
        except DataplaneFailure as exc:
            if netlink_code(exc.__cause__ or exc) == errno.EOPNOTSUPP:
                return False
            raise
        finally:
            os.close(own)
            delete_link(host)
    return True


def disable_link(ifname: str) -> bool:
    """Sets `ifname` in the host namespace down; False when it does not exist. The kernel drops
    the routes through it at once, and a veth's peer loses its carrier."""
    with host_batch() as batch:
        batch.set_link(ifname, up=False)
        try:
            send(batch, f"setting link {ifname} down")
        except DataplaneFailure as exc:
            if netlink_code(exc.__cause__ or exc) == errno.ENODEV:
                return False
            raise
    return True


def links_with_alias_prefix(prefix: str) -> dict[str, str]:
    """Host-namespace links whose IFLA_IFALIAS starts with `prefix`, as {ifname: alias}."""
    with host_reader() as reader, translated("listing links"):
        return {link.name: link.alias for link in reader.links()
                if link.alias and link.alias.startswith(prefix)}


def link_names_with_prefix(prefix: str) -> list[str]:
    """Host-namespace links whose name starts with `prefix`, sorted."""
    with host_reader() as reader, translated("listing links"):
        return sorted(link.name for link in reader.links() if link.name.startswith(prefix))


FORWARDING = {4: "/proc/sys/net/ipv4/ip_forward", 6: "/proc/sys/net/ipv6/conf/all/forwarding"}


def enable_forwarding(versions: set[int]) -> None:
    """IP forwarding on in the host namespace, only for the families pods use: IPv6
    forwarding makes the node ignore router advertisements (accept_ra=1), which a v4-only
    cluster must not impose."""
    with translated("enabling IP forwarding"):
        for version in sorted(versions):
            with open(FORWARDING[version], "w") as knob:
                knob.write("1")

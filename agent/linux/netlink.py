"""Netlink for the rest of the agent: sockets and sessions per namespace, the host's links, and
the one translation of netlink errors into ours (no shell-outs).

This is the one place where pyroute2's NetlinkError and the OSErrors of raw netlink become
`agent.model.errors`: a refused netlink request is the error class the caller names
(`DataplaneFailure` on the host side, `PodSideFailure` inside the pod), cause chained. A netns
path the runtime gave that does not exist or is no pod's network namespace is already
`InvalidEnvironment` naming CNI_NETNS when agent/linux/netns opens it.

"Host" is the calling thread's own namespace (see agent/linux/netns). Every helper opens its own
short-lived socket or pyroute2 session (an `IPRoute` must stay in the thread that made it); an
ADD's pod namespace comes as the request's `PodNetns`, opened once.
"""

from __future__ import annotations

import errno
import hashlib
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from pyroute2 import NetlinkError

from agent.linux import nlread, nlwrite
from agent.linux.iproute import Session
from agent.linux.netns import PodNetns, using
from agent.model.errors import CniError, DataplaneFailure, InvalidEnvironment
from agent.model.pod import PodKey


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


# ---- sockets and sessions ---------------------------------------------------------------------


def _host_socket() -> socket.socket:
    with translated("netlink socket"):
        return socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE)


@contextmanager
def host_session() -> Iterator[Session]:
    """A pyroute2 session (agent/linux/iproute) in the calling thread's namespace."""
    with translated("netlink socket"):
        session = Session.host()
    with session:
        yield session


@contextmanager
def host_batch() -> Iterator[nlwrite.Batch]:
    """A batch of raw rtnetlink requests (agent/linux/nlwrite) for the calling thread's
    namespace."""
    with _host_socket() as sock:
        yield nlwrite.Batch(sock)


@contextmanager
def pod_batch(netns_path: str, held: PodNetns | None = None) -> Iterator[nlwrite.Batch]:
    """A batch of raw rtnetlink requests for the pod namespace at `netns_path`, on the
    request's socket in it when the request holds the namespace (`held`)."""
    with using(netns_path, held) as netns:
        yield nlwrite.Batch(netns.route_socket())


@contextmanager
def host_reader() -> Iterator[nlread.Reader]:
    """Raw reads (agent/linux/nlread) in the calling thread's namespace (the node's)."""
    with _host_socket() as sock:
        yield nlread.Reader(sock)


@contextmanager
def pod_reader(netns_path: str) -> Iterator[nlread.Reader]:
    """Raw reads inside the pod namespace at `netns_path`."""
    with PodNetns.open(netns_path) as netns:
        yield nlread.Reader(netns.route_socket())


def send(
    batch: nlwrite.Batch, what: str, error: type[CniError] = DataplaneFailure
) -> dict[int, nlwrite.Link]:
    """`batch.send()`; a refused request is `error` naming `what` and that request."""
    try:
        return batch.send()
    except nlwrite.RequestFailed as exc:
        raise error(f"{what}: {exc.what}", describe(exc)) from exc
    except OSError as exc:
        raise error(what, describe(exc)) from exc


# ---- the host's links -------------------------------------------------------------------------


def mac_from_key(key: PodKey) -> str:
    """A deterministic, locally administered unicast MAC for an attachment."""
    raw = bytearray(hashlib.sha256(f"mac\0{key.container_id}\0{key.ifname}".encode()).digest()[:6])
    raw[0] = (raw[0] & 0xFC) | 0x02  # clear multicast bit, set locally administered bit
    return ":".join(f"{b:02x}" for b in raw)


def create_veth(
    host_ifname: str, pod_netns: str, pod_ifname: str, mtu: int, pod_mac: str | None, alias: str
) -> tuple[int, str]:
    """Creates a veth pair, the peer directly in `pod_netns` as `pod_ifname`; both ends up.

    The host end carries `alias` (IFLA_IFALIAS, the owner tag). Returns the host end's index
    and MAC. On failure nothing of the pair is left behind.
    """
    with PodNetns.open(pod_netns) as netns:
        with host_batch() as batch:
            index, mac = add_veth(batch, host_ifname, netns, pod_ifname, mtu, pod_mac, alias)
        try:
            with pod_batch(pod_netns, netns) as pod:
                pod.set_link(pod_ifname, up=True)
                send(pod, f"bringing {pod_ifname} up in the pod")
        except BaseException:
            delete_link(host_ifname)
            raise
    return index, mac


def add_veth(
    batch: nlwrite.Batch, host_ifname: str, pod_netns: PodNetns, pod_ifname: str, mtu: int,
    pod_mac: str | None, alias: str,
) -> tuple[int, str]:
    """Creates a veth pair through `batch` (host namespace), the peer directly in `pod_netns`
    (by its fd) as `pod_ifname`, left down (agent/linux/pod_netns brings it up); the host end up
    and tagged with `alias`. Returns the host end's index and MAC; on failure nothing is left.

    One round trip: the add (the host end created up: without carrier until the pod end comes
    up, so IPv6 makes no link-local address on it before DAD is off), the alias (the kernel
    ignores IFLA_IFALIAS in a new link) and a read of the index and the MAC, in one batch.
    """
    _check_ifname(pod_ifname)
    try:
        link = _add_pair(batch, host_ifname, mtu, pod_ifname, pod_netns.fd, pod_mac, alias)
    except OSError as exc:
        raise _veth_add_error(exc, host_ifname, pod_netns.path, pod_ifname) from exc
    try:
        with translated(f"setting up veth host end {host_ifname}"):
            _no_dad(host_ifname)
    except BaseException:
        delete_link(host_ifname)
        raise
    return link.index, link.mac


def _add_pair(
    batch: nlwrite.Batch, host_ifname: str, mtu: int, pod_ifname: str, fd: int,
    pod_mac: str | None, alias: str,
) -> nlwrite.Link:
    """Adds the pair; a host end of that name left by an interrupted attempt of the same
    attachment (the name derives from its key) is deleted first. Checking for it only when
    the add fails keeps a lookup off every ADD."""
    for retry in (False, True):
        batch.add_veth(host_ifname, mtu, pod_ifname, fd, pod_mac)
        batch.set_link(host_ifname, alias=alias)
        seq = batch.get_link(host_ifname)
        try:
            return batch.send()[seq]
        except OSError as exc:
            if retry or exc.errno != errno.EEXIST or not delete_link(host_ifname):
                raise
    raise AssertionError("not reached: the second attempt returns or raises")


def _check_ifname(ifname: str) -> None:
    # the kernel's rules (dev_valid_name): 1-15 bytes, no "/", ":" or whitespace, not "." or ".."
    size = len(ifname.encode())
    if not 0 < size <= 15 or ifname in (".", "..") or any(c in "/:" or c.isspace() for c in ifname):
        raise InvalidEnvironment(f"CNI_IFNAME {ifname!r} is not a valid interface name")


def _veth_add_error(
    exc: OSError, host_ifname: str, pod_netns: str, pod_ifname: str
) -> CniError:
    if exc.errno == errno.EEXIST and not link_exists(host_ifname):
        return InvalidEnvironment(
            f"CNI_IFNAME {pod_ifname} already exists in CNI_NETNS {pod_netns}"
        )
    return DataplaneFailure(f"creating veth {host_ifname} <-> {pod_ifname}", describe(exc))


def _no_dad(ifname: str) -> None:
    """No IPv6 duplicate address detection on a host end, set before it comes up.

    While its link-local address is tentative (about a second of DAD) the node cannot send
    neighbor solicitations on it, so the pod's first IPv6 packets would go unanswered. The address
    is derived from a fresh random MAC on a point-to-point link: DAD protects nothing here.
    """
    try:
        with open(f"/proc/sys/net/ipv6/conf/{ifname}/accept_dad", "w") as knob:
            knob.write("0")
    except FileNotFoundError:  # IPv6 disabled on the node: nothing to detect
        pass


def delete_link(ifname: str) -> bool:
    """Deletes `ifname` in the host namespace; False when it did not exist."""
    with host_session() as links, translated(f"deleting link {ifname}"):
        return links.delete_link_named(ifname)


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


def link_exists(ifname: str) -> bool:
    """True when a link named `ifname` exists in the host namespace."""
    with host_session() as links, translated(f"looking up link {ifname}"):
        return links.ifindex(ifname) is not None


def links_with_alias_prefix(prefix: str) -> dict[str, str]:
    """Host-namespace links whose IFLA_IFALIAS starts with `prefix`, as {ifname: alias}."""
    with host_reader() as reader, translated("listing links"):
        return {link.name: link.alias for link in reader.links()
                if link.alias and link.alias.startswith(prefix)}


FORWARDING = {4: "/proc/sys/net/ipv4/ip_forward", 6: "/proc/sys/net/ipv6/conf/all/forwarding"}


def enable_forwarding(versions: set[int]) -> None:
    """IP forwarding on in the host namespace, only for the families pods use: IPv6
    forwarding makes the node ignore router advertisements (accept_ra=1), which a v4-only
    cluster must not impose."""
    with translated("enabling IP forwarding"):
        for version in sorted(versions):
            with open(FORWARDING[version], "w") as knob:
                knob.write("1")

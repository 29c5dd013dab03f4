"""Netlink helpers shared by the dataplane drivers and agent/linux/pod_netns (pyroute2, no
shell-outs).

This is the one place where pyroute2's NetlinkError and the OSErrors of namespace handling become
`agent.model.errors`: a netns path the runtime gave that does not exist or is no network namespace
is `InvalidEnvironment` naming CNI_NETNS (so is the node's own namespace); a refused netlink
request is the error class the caller names (`DataplaneFailure` on the host side,
`PodSideFailure` inside the pod), cause chained.

Namespaces: any path the runtime gives is accepted as is (containerd's /var/run/netns/cni-...,
CRI-O's, /proc/PID/ns/net); nothing is parsed out of it. A netlink socket for a pod namespace is
made by the calling thread itself: it setns()es into the pod namespace, opens the socket and
setns()es back. A socket stays bound to the namespace it was created in, and network namespace
membership is per thread, so nothing else in the process is affected. This is cheaper than
pyroute2's `IPRoute(netns=...)` (which forks a helper process, unwelcome in a process full of
gRPC threads) and it never creates a missing namespace. The "host" namespace is the calling
thread's own, so tests can run a driver in a thread that entered a test node namespace.

pyroute2 `IPRoute` objects must stay in the thread that created them, so every helper opens its
own, short-lived one.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import hashlib
import os
import socket
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from pyroute2 import IPRoute, NetlinkError
from pyroute2.netlink import NETLINK_ROUTE

from agent.linux import nlwrite
from agent.linux.nlcodec import IFA_F_NODAD
from agent.model.errors import CniError, DataplaneFailure, InternalError, InvalidEnvironment
from agent.model.pod import IPInterface, PodKey

CLONE_NEWNET = 0x40000000
NS_GET_NSTYPE = 0xB703  # ioctl on a namespace fd: returns its CLONE_NEW* type
_libc = ctypes.CDLL(None, use_errno=True)


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


@contextmanager
def netns_fd(netns_path: str) -> Iterator[int]:
    """An open fd of the network namespace at `netns_path`, closed at the end of the block.

    Raises InvalidEnvironment naming CNI_NETNS when the path is missing, is anything but a network
    namespace (a FIFO, a device, a directory, an ordinary file, another namespace type), or is the
    node's own namespace (a pod's address and default route would land in the node's tables).
    """
    fd = open_netns(netns_path)
    try:
        yield fd
    finally:
        os.close(fd)


def check_pod_netns(netns_path: str) -> None:
    """Raises InvalidEnvironment unless `netns_path` is a network namespace of a pod."""
    os.close(open_netns(netns_path))


def open_netns(netns_path: str) -> int:
    """A read-only fd of the namespace file; nothing is opened before it is known to be one.

    The path is first opened with O_PATH, which never blocks and opens nothing (a FIFO would
    block a plain open for ever; a device's open has effects). Only an nsfs file is then reopened
    for real, through /proc/self/fd, so the path cannot be swapped in between.
    """
    try:
        pfd = os.open(netns_path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise InvalidEnvironment(f"CNI_NETNS {netns_path} does not exist") from exc
    except OSError as exc:
        raise InvalidEnvironment(f"CNI_NETNS {netns_path} cannot be opened", describe(exc)) from exc
    try:
        info = os.fstat(pfd)
        if not stat.S_ISREG(info.st_mode) or info.st_dev != _nsfs_device():
            raise InvalidEnvironment(
                f"CNI_NETNS {netns_path} is not a network namespace", _file_kind(info.st_mode)
            )
        with translated(f"opening CNI_NETNS {netns_path}", InvalidEnvironment):
            fd = os.open(f"/proc/self/fd/{pfd}", os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    finally:
        os.close(pfd)
    try:
        _check_netns(fd, netns_path)
        if (info.st_dev, info.st_ino) in _node_namespaces():
            raise InvalidEnvironment(
                f"CNI_NETNS {netns_path} is the node's own network namespace, not a pod's"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def _nsfs_device() -> int:
    """The st_dev shared by every namespace file (they all live on the one nsfs)."""
    return os.stat("/proc/thread-self/ns/net").st_dev


def _node_namespaces() -> set[tuple[int, int]]:
    """(st_dev, st_ino) of the namespaces a pod must never be: the calling thread's (the node's,
    see the module docstring), the agent process's, and init's when it can be read."""
    found = set()
    for path in ("/proc/thread-self/ns/net", "/proc/self/ns/net", "/proc/1/ns/net"):
        try:
            info = os.stat(path)
        except OSError:  # /proc/1 may be hidden from us (another PID namespace, hidepid)
            continue
        found.add((info.st_dev, info.st_ino))
    return found


def _file_kind(mode: int) -> str:
    kinds = [
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISREG, "an ordinary file"),
    ]
    return next((f"it is {name}" for test, name in kinds if test(mode)), "it is no regular file")


def _check_netns(fd: int, netns_path: str) -> None:
    try:
        kind = fcntl.ioctl(fd, NS_GET_NSTYPE)
    except OSError as exc:  # ENOTTY: an ordinary file, not a namespace
        raise InvalidEnvironment(f"CNI_NETNS {netns_path} is not a network namespace") from exc
    if kind != CLONE_NEWNET:
        raise InvalidEnvironment(f"CNI_NETNS {netns_path} is a namespace, but not a network one")


def enter_netns(fd: int) -> None:
    """Moves the calling thread into the network namespace `fd` (for a thread of our own that
    must work where another one does; see agent/dataplane/reaper)."""
    _setns(fd)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _socket_in(
    nsfd: int, netns_path: str, family: int = socket.AF_NETLINK,
    kind: int = socket.SOCK_DGRAM, proto: int = NETLINK_ROUTE,
) -> socket.socket:
    """A socket (NETLINK_ROUTE unless told) created inside the namespace `nsfd`; the thread
    comes back. A socket stays in the namespace it was made in."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            _setns(nsfd)
        except OSError as exc:
            raise InvalidEnvironment(f"cannot enter CNI_NETNS {netns_path}", describe(exc)) from exc
        try:
            return socket.socket(family, kind, proto if family == socket.AF_NETLINK else 0)
        finally:
            try:
                _setns(own)
            except OSError as exc:  # the thread would stay in the pod: never carry on
                raise InternalError("cannot return to the agent's netns", describe(exc)) from exc
    finally:
        os.close(own)


SO_NETNS_COOKIE = 71  # linux/socket.h, kernel >= 5.14


def netns_cookie(netns_path: str) -> int | None:
    """The namespace's cookie: a 64-bit number the kernel never gives to another namespace while
    it runs (its nsfs inode number is reused as soon as a namespace is freed). None on a kernel
    without SO_NETNS_COOKIE. Raises InvalidEnvironment when the path is no pod namespace."""
    with netns_fd(netns_path) as fd:
        sock = _socket_in(fd, netns_path)
    with sock:
        try:
            raw = sock.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8)
        except OSError:  # ENOPROTOOPT: an older kernel
            return None
    return int.from_bytes(raw, "little")


@contextmanager
def netns_socket(netns_path: str, family: int, kind: int) -> Iterator[socket.socket]:
    """A socket of `family` made inside the pod namespace at `netns_path` (for ioctls)."""
    with netns_fd(netns_path) as fd:
        sock = _socket_in(fd, netns_path, family, kind)
    try:
        yield sock
    finally:
        sock.close()


@contextmanager
def pod_ns(netns_path: str) -> Iterator[IPRoute]:
    """An IPRoute bound to the network namespace at `netns_path` (never created if missing)."""
    with netns_fd(netns_path) as fd:
        sock = _socket_in(fd, netns_path)
    try:
        ipr = IPRoute(use_socket=sock)
    except BaseException:
        sock.close()
        raise
    try:
        yield ipr
    finally:
        ipr.close()
        sock.close()


@contextmanager
def host_ns() -> Iterator[IPRoute]:
    """An IPRoute in the calling thread's own network namespace (the node's)."""
    with translated("netlink socket"):
        ipr = IPRoute()
    try:
        yield ipr
    finally:
        ipr.close()


def ifindex(ipr: IPRoute, ifname: str) -> int | None:
    """The index of `ifname` in the namespace of `ipr`, or None when there is no such link."""
    found = ipr.link_lookup(ifname=ifname)
    return int(found[0]) if found else None


def mac_from_key(key: PodKey) -> str:
    """A deterministic, locally administered unicast MAC for an attachment."""
    raw = bytearray(hashlib.sha256(f"mac\0{key.container_id}\0{key.ifname}".encode()).digest()[:6])
    raw[0] = (raw[0] & 0xFC) | 0x02  # clear multicast bit, set locally administered bit
    return ":".join(f"{b:02x}" for b in raw)


@contextmanager
def host_batch() -> Iterator[nlwrite.Batch]:
    """A batch of raw rtnetlink requests (agent/linux/nlwrite) for the calling thread's
    namespace."""
    with translated("netlink socket"):
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_ROUTE)
    with sock:
        yield nlwrite.Batch(sock)


@contextmanager
def pod_batch(netns_path: str) -> Iterator[nlwrite.Batch]:
    """A batch of raw rtnetlink requests for the pod namespace at `netns_path`."""
    with netns_fd(netns_path) as fd:
        sock = _socket_in(fd, netns_path)
    with sock:
        yield nlwrite.Batch(sock)


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


def create_veth(
    host_ifname: str, pod_netns: str, pod_ifname: str, mtu: int, pod_mac: str | None, alias: str
) -> tuple[int, str]:
    """Creates a veth pair, the peer directly in `pod_netns` as `pod_ifname`; both ends up.

    The host end carries `alias` (IFLA_IFALIAS, the owner tag). Returns the host end's index
    and MAC. On failure nothing of the pair is left behind.
    """
    with host_batch() as batch:
        index, mac = add_veth(batch, host_ifname, pod_netns, pod_ifname, mtu, pod_mac, alias)
    try:
        with pod_batch(pod_netns) as pod:
            pod.set_link(pod_ifname, up=True)
            send(pod, f"bringing {pod_ifname} up in the pod")
    except BaseException:
        delete_link(host_ifname)
        raise
    return index, mac


def add_veth(
    batch: nlwrite.Batch, host_ifname: str, pod_netns: str, pod_ifname: str, mtu: int,
    pod_mac: str | None, alias: str,
) -> tuple[int, str]:
    """Creates a veth pair through `batch` (host namespace), the peer directly in `pod_netns`
    as `pod_ifname`, left down (agent/linux/pod_netns brings it up); the host end up and tagged with
    `alias`. Returns the host end's index and MAC; on failure nothing is left.

    One round trip: the add (the host end created up: without carrier until the pod end comes
    up, so IPv6 makes no link-local address on it before DAD is off), the alias (the kernel
    ignores IFLA_IFALIAS in a new link) and a read of the index and the MAC, in one batch.
    """
    _check_ifname(pod_ifname)
    with netns_fd(pod_netns) as fd:
        try:
            link = _add_pair(batch, host_ifname, mtu, pod_ifname, fd, pod_mac, alias)
        except OSError as exc:
            raise _veth_add_error(exc, host_ifname, pod_netns, pod_ifname) from exc
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
    with host_ns() as ipr, translated(f"deleting link {ifname}"):
        try:
            ipr.link("del", ifname=ifname)
        except NetlinkError as exc:
            if exc.code == errno.ENODEV:
                return False
            raise
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


def link_exists(ifname: str) -> bool:
    """True when a link named `ifname` exists in the host namespace."""
    with host_ns() as ipr, translated(f"looking up link {ifname}"):
        return ifindex(ipr, ifname) is not None


def links_with_alias_prefix(prefix: str) -> dict[str, str]:
    """Host-namespace links whose IFLA_IFALIAS starts with `prefix`, as {ifname: alias}."""
    found: dict[str, str] = {}
    with host_ns() as ipr, translated("listing links"):
        for link in ipr.get_links():
            alias = link.get_attr("IFLA_IFALIAS")
            if alias and str(alias).startswith(prefix):
                found[str(link.get_attr("IFLA_IFNAME"))] = str(alias)
    return found


def add_address(ipr: IPRoute, index: int, iface: IPInterface) -> None:
    """Adds an address; an address already in place is fine (retries and restarts find it).

    IPv6 addresses skip duplicate address detection: they are usable at once, and IPAM already
    guarantees uniqueness.
    """
    try:
        ipr.addr(
            "add",
            index=index,
            address=str(iface.ip),
            prefixlen=iface.network.prefixlen,
            flags=IFA_F_NODAD if iface.version == 6 else 0,
        )
    except NetlinkError as exc:
        if exc.code != errno.EEXIST:
            raise


FORWARDING = {4: "/proc/sys/net/ipv4/ip_forward", 6: "/proc/sys/net/ipv6/conf/all/forwarding"}


def enable_forwarding(versions: set[int]) -> None:
    """IP forwarding on in the host namespace, only for the families pods use: IPv6
    forwarding makes the node ignore router advertisements (accept_ra=1), which a v4-only
    cluster must not impose."""
    with translated("enabling IP forwarding"):
        for version in sorted(versions):
            with open(FORWARDING[version], "w") as knob:
                knob.write("1")

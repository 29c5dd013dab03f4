"""Network namespaces: a pod's, opened and checked once per request (`PodNetns`), and sockets
made inside one.

Any path the runtime gives is accepted as is (containerd's /var/run/netns/cni-..., CRI-O's,
/proc/PID/ns/net); nothing is parsed out of it. `PodNetns.open` checks it once: a path that does
not exist, is anything but a network namespace (a FIFO, a device, a directory, an ordinary file,
another namespace type), or is the node's own namespace is `InvalidEnvironment` naming CNI_NETNS
(a pod's address and default route must never land in the node's tables). The fd it keeps pins
that namespace: an ADD creates the veth peer in it by fd, reads its cookie and configures it
through one socket made inside it, so the path is opened once and cannot be swapped under the
request between its steps.

A socket for a pod namespace is made by the calling thread itself: it setns()es into the pod
namespace, opens the socket and setns()es back. A socket stays bound to the namespace it was
created in, and network namespace membership is per thread, so nothing else in the process is
affected. This is cheaper than pyroute2's `IPRoute(netns=...)` (which forks a helper process,
unwelcome in a process full of gRPC threads) and it never creates a missing namespace. The "host"
namespace is the calling thread's own, so tests can run a driver in a thread that entered a test
node namespace.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from agent.model.errors import InternalError, InvalidEnvironment

CLONE_NEWNET = 0x40000000  # linux/sched.h
NS_GET_NSTYPE = 0xB703  # linux/nsfs.h: ioctl on a namespace fd, returns its CLONE_NEW* type
SO_NETNS_COOKIE = 71  # linux/socket.h, kernel >= 5.14
OWN_NETNS = "/proc/thread-self/ns/net"  # the calling thread's namespace
_libc = ctypes.CDLL(None, use_errno=True)


class PodNetns:
    """A pod's network namespace held open: `path` as the runtime gave it, `fd` an open,
    checked nsfs fd. Made by `open`; one request's, used by its thread only; closed once."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd
        self._route: socket.socket | None = None

    @classmethod
    def open(cls, path: str) -> PodNetns:
        """Opens and checks the namespace at `path` (InvalidEnvironment naming CNI_NETNS)."""
        return cls(path, _open_checked(path))

    def route_socket(self) -> socket.socket:
        """A NETLINK_ROUTE socket inside the namespace, made on first use and kept until
        `close` (one setns round trip per request however many steps use it)."""
        if self._route is None:
            self._route = self.socket(socket.AF_NETLINK, socket.SOCK_DGRAM)
        return self._route

    def socket(self, family: int, kind: int) -> socket.socket:
        """A new socket of `family` inside the namespace (NETLINK_ROUTE for AF_NETLINK); the
        caller closes it."""
        return _socket_in(self.fd, self.path, family, kind)

    def cookie(self) -> int | None:
        """The namespace's cookie: a 64-bit number the kernel never gives to another namespace
        while it runs (its nsfs inode number is reused as soon as a namespace is freed). None on
        a kernel without SO_NETNS_COOKIE."""
        sock = self.route_socket()
        try:
            raw = sock.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8)
        except OSError:  # ENOPROTOOPT: an older kernel
            return None
        return int.from_bytes(raw, "little")

    def inode(self) -> tuple[int, int]:
        """(st_dev, st_ino) of the namespace file."""
        info = os.fstat(self.fd)
        return info.st_dev, info.st_ino

    def close(self) -> None:
        if self._route is not None:
            self._route.close()
            self._route = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> PodNetns:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


@contextmanager
def using(path: str, held: PodNetns | None) -> Iterator[PodNetns]:
    """The namespace at `path`: `held` when the caller holds it open already (an ADD), else
    opened and checked here and closed at the end of the block."""
    if held is None:
        with PodNetns.open(path) as netns:
            yield netns
        return
    if held.path != path:  # the request's namespace and the pod's: one and the same
        raise InternalError(f"netns {held.path} is held, but {path} was asked for")
    yield held


def enter_netns(fd: int) -> None:
    """Moves the calling thread into the network namespace `fd` (for a thread of our own that
    must work where another one does; see agent/dataplane/undo)."""
    _setns(fd)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def describe(exc: OSError) -> str:
    """An OSError in words: its errno's name and message when it has one."""
    code = exc.errno
    if code:
        return f"{errno.errorcode.get(code, code)}: {os.strerror(code)}"
    return str(exc) or type(exc).__name__


def own_netns_fd() -> int:
    """An fd (close-on-exec; the caller closes it) of the calling thread's network namespace."""
    return os.open(OWN_NETNS, os.O_RDONLY | os.O_CLOEXEC)


def _socket_in(nsfd: int, netns_path: str, family: int, kind: int) -> socket.socket:
    """A socket created inside the namespace `nsfd`; the thread comes back."""
    own = own_netns_fd()
    try:
        try:
            _setns(nsfd)
        except OSError as exc:
            raise InvalidEnvironment(
                f"cannot enter CNI_NETNS {netns_path}", describe(exc)) from exc
        try:
            proto = socket.NETLINK_ROUTE if family == socket.AF_NETLINK else 0
            return socket.socket(family, kind, proto)
        finally:
            try:
                _setns(own)
            except OSError as exc:  # the thread would stay in the pod: never carry on
                raise InternalError(
                    "cannot return to the agent's netns", describe(exc)) from exc
    finally:
        os.close(own)


def _open_checked(netns_path: str) -> int:
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
        raise InvalidEnvironment(
            f"CNI_NETNS {netns_path} cannot be opened", describe(exc)) from exc
    try:
        info = os.fstat(pfd)
        if not stat.S_ISREG(info.st_mode) or info.st_dev != _nsfs_device():
            raise InvalidEnvironment(
                f"CNI_NETNS {netns_path} is not a network namespace", _file_kind(info.st_mode)
            )
        try:
            fd = os.open(f"/proc/self/fd/{pfd}", os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            raise InvalidEnvironment(
                f"opening CNI_NETNS {netns_path}", describe(exc)) from exc
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
    return os.stat(OWN_NETNS).st_dev


def _node_namespaces() -> set[tuple[int, int]]:
    """(st_dev, st_ino) of the namespaces a pod must never be: the calling thread's (the node's,
    see the module docstring), the agent process's, and init's when it can be read."""
    found = set()
    for path in (OWN_NETNS, "/proc/self/ns/net", "/proc/1/ns/net"):
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

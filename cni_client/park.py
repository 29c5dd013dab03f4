"""A journaled DEL parks the pod's end of its link in the node's namespace (stdlib only).

When the agent cannot take a DEL, the plugin journals it and succeeds, and the runtime removes
the pod's network namespace at once. The kernel then destroys the pod's veth pair with it (and
a TAP's Linux end). With the VPP dataplane, VPP's AF_PACKET socket is still bound to the pair's
host end: VPP would poll a device that is gone (`af_packet_fd_error: Network is down`) until the
agent settles the journal. So before answering, the plugin moves the pod's interface out into
the namespace it runs in (the node's, as a runtime's plugins do), under the name
`vsj<digest of the attachment>`. Moving a link between namespaces takes it down and flushes its
addresses and routes, so the parked end carries nothing. The pair then outlives the pod's
namespace until the agent, settling the entry, removes VPP's interface and then the veth
(deleting either end of a pair deletes both). A pod made from the VPP agent's pool has a
macvlan instead, on a pair that stays in the node's namespace: it needs no parking.

Only the agent's own kinds of link are parked (a veth; a TAP, which VPP creates in TAP mode),
and never from the plugin's own namespace (a runtime that passes the node's namespace must not
see the node's interface renamed). Best effort: `park` never raises; it returns what it did or
why it did not, for the log. A namespace that is gone, or that holds no such interface, has
nothing to park.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import socket
import struct

CLONE_NEWNET = 0x40000000
RTM_NEWLINK, RTM_GETLINK = 16, 18
NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
IFLA_IFNAME, IFLA_LINKINFO, IFLA_NET_NS_FD = 3, 18, 28
IFLA_INFO_KIND = 1
NLA_F_NESTED = 0x8000
OURS = (b"veth", b"tun")  # IFLA_INFO_KIND of a veth, of a TAP
PREFIX = "vsj"


def parked_name(container_id: str, ifname: str) -> str:
    """The parked end's name in the node's namespace (15 characters, fits IFNAMSIZ)."""
    digest = hashlib.sha256(f"park\0{container_id}\0{ifname}".encode()).hexdigest()
    return PREFIX + digest[:12]


def park(netns: str, ifname: str, container_id: str) -> str:
    """Moves `ifname` out of the namespace at `netns` into this thread's own; says how it went."""
    if not netns:
        return "no network namespace given: nothing to park"
    try:
        pod = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return f"{netns}: {exc.strerror}: nothing to park"
    try:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            if _same(pod, own):
                return f"{netns} is the plugin's own namespace: nothing parked"
            sock = _socket_in(pod, own)
            with sock:
                found = _link(sock, ifname)
                if found is None:
                    return f"no {ifname} in {netns}: nothing to park"
                index, kind = found
                if kind not in OURS:
                    return f"{ifname} in {netns} is a {kind.decode() or 'link'}: not parked"
                name = parked_name(container_id, ifname)
                attrs = _attr(IFLA_NET_NS_FD, struct.pack("I", own)) + _attr(
                    IFLA_IFNAME, name.encode() + b"\0")
                _call(sock, RTM_NEWLINK, index, attrs)
                return f"{ifname} parked in the node's namespace as {name}"
        finally:
            os.close(own)
    except OSError as exc:
        return f"{ifname} in {netns} not parked: {exc.strerror or exc}"
    finally:
        os.close(pod)


def _socket_in(netns_fd: int, own_fd: int) -> socket.socket:
    """A NETLINK_ROUTE socket made inside `netns_fd` (the thread returns to `own_fd`)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(netns_fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    try:
        return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    finally:
        # Never seen; and nothing after the parking uses the network (the journal is a file).
        if libc.setns(own_fd, CLONE_NEWNET) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"cannot return to the plugin's namespace: {os.strerror(code)}")


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("HH", length, kind) + payload + b"\0" * ((4 - length % 4) % 4)


def _call(sock: socket.socket, kind: int, index: int, attrs: bytes,
          flags: int = NLM_F_REQUEST | NLM_F_ACK) -> bytes:
    """Sends one request (an ifinfomsg for link `index` and `attrs`); returns the first reply
    that is not an ACK, or b"" after an ACK. A netlink error becomes OSError."""
    body = struct.pack("BxHiII", socket.AF_UNSPEC, 0, index, 0, 0) + attrs
    sock.sendall(struct.pack("IHHII", 16 + len(body), kind, flags, 1, 0) + body)
    data = sock.recv(65536)
    length, msg_type = struct.unpack_from("IH", data)
    if msg_type == NLMSG_ERROR:
        (code,) = struct.unpack_from("i", data, 16)
        if code:
            raise OSError(-code, os.strerror(-code))
        return b""
    return data[:length]


def _same(a: int, b: int) -> bool:
    sa, sb = os.fstat(a), os.fstat(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _attrs(data: bytes, offset: int) -> dict[int, bytes]:
    """{type: payload} of the netlink attributes from `offset` to the end of `data`."""
    out: dict[int, bytes] = {}
    while offset + 4 <= len(data):
        length, kind = struct.unpack_from("HH", data, offset)
        if length < 4:
            break
        out[kind & ~NLA_F_NESTED] = data[offset + 4:offset + length]
        offset += (length + 3) & ~3
    return out


def _link(sock: socket.socket, ifname: str) -> tuple[int, bytes] | None:
    """(index, IFLA_INFO_KIND) of link `ifname`, or None when there is none."""
    try:
        reply = _call(sock, RTM_GETLINK, 0, _attr(IFLA_IFNAME, ifname.encode() + b"\0"),
                      NLM_F_REQUEST)
    except OSError as exc:
        if exc.errno == errno.ENODEV:
            return None
        raise
    (index,) = struct.unpack_from("i", reply, 16 + 4)
    info = _attrs(_attrs(reply, 32).get(IFLA_LINKINFO, b""), 0)
    return int(index), info.get(IFLA_INFO_KIND, b"").rstrip(b"\0")

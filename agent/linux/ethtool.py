"""Reading and switching a device's offload features (ethtool's `-k`/`-K`) inside a namespace.

The kernel's SIOCETHTOOL ioctl on a socket created inside the namespace: the feature's index
is looked up by its name (ETHTOOL_GSTRINGS of the ETH_SS_FEATURES set, as ethtool does), then
ETHTOOL_GFEATURES / ETHTOOL_SFEATURES read or request it. Used by the VPP driver, which
switches IPv4 TCP segmentation off in veth pods (or on the node's link a pod's macvlan sits on)
when VPP's node mesh must segment their traffic (docs/vpp.md, "The node mesh in VPP").
"""

from __future__ import annotations

import ctypes
import fcntl
import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager

from agent.linux.netns import PodNetns

SIOCETHTOOL = 0x8946
ETHTOOL_GSTRINGS = 0x1B
ETHTOOL_GSSET_INFO = 0x37
ETHTOOL_GFEATURES = 0x3A
ETHTOOL_SFEATURES = 0x3B
ETH_SS_FEATURES = 4
ETH_GSTRING_LEN = 32
IFNAMSIZ = 16


def _ioctl(sock: socket.socket, ifname: str, data: ctypes.Array[ctypes.c_char]) -> None:
    """SIOCETHTOOL with `data` as the ethtool command (struct ifreq: name + pointer)."""
    ifreq = struct.pack(f"{IFNAMSIZ}sP", ifname.encode(), ctypes.addressof(data))
    fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq.ljust(40, b"\0"))


def _feature_names(sock: socket.socket, ifname: str) -> list[str]:
    info = ctypes.create_string_buffer(struct.pack("IIQI", ETHTOOL_GSSET_INFO, 0,
                                                   1 << ETH_SS_FEATURES, 0))
    _ioctl(sock, ifname, info)
    count = struct.unpack_from("I", info.raw, 16)[0]
    strings = ctypes.create_string_buffer(12 + count * ETH_GSTRING_LEN)
    struct.pack_into("III", strings, 0, ETHTOOL_GSTRINGS, ETH_SS_FEATURES, count)
    _ioctl(sock, ifname, strings)
    raw = strings.raw[12:]
    return [raw[i * ETH_GSTRING_LEN:(i + 1) * ETH_GSTRING_LEN].split(b"\0", 1)[0].decode()
            for i in range(count)]


def _index(sock: socket.socket, ifname: str, feature: str) -> tuple[int, int]:
    """The feature's bit index and the number of 32-bit feature words (the kernel wants
    exactly that many blocks in ETHTOOL_SFEATURES)."""
    names = _feature_names(sock, ifname)
    if feature not in names:
        raise OSError(f"{ifname} has no feature {feature!r}")
    return names.index(feature), (len(names) + 31) // 32


@contextmanager
def _socket(netns_path: str | None) -> Iterator[socket.socket]:
    """An AF_INET socket inside the pod's namespace (None: the calling thread's): ioctls on it
    reach that namespace's devices."""
    if netns_path is None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            yield s
        return
    with PodNetns.open(netns_path) as netns, netns.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        yield s


def feature(netns_path: str | None, ifname: str, name: str) -> bool:
    """Whether feature `name` (e.g. "tx-tcp-segmentation") is active on the device."""
    with _socket(netns_path) as sock:
        index, blocks = _index(sock, ifname, name)
        buf = ctypes.create_string_buffer(8 + blocks * 16)
        struct.pack_into("II", buf, 0, ETHTOOL_GFEATURES, blocks)
        _ioctl(sock, ifname, buf)
        # blocks of {available, requested, active, never_changed}
        active = struct.unpack_from("I", buf.raw, 8 + (index // 32) * 16 + 8)[0]
        return bool(active >> (index % 32) & 1)


def set_feature(netns_path: str | None, ifname: str, name: str, on: bool) -> None:
    """Requests feature `name` on or off; OSError when the kernel refuses."""
    with _socket(netns_path) as sock:
        index, blocks = _index(sock, ifname, name)
        buf = ctypes.create_string_buffer(8 + blocks * 8)
        struct.pack_into("II", buf, 0, ETHTOOL_SFEATURES, blocks)
        bit = 1 << (index % 32)
        struct.pack_into("II", buf, 8 + (index // 32) * 8, bit, bit if on else 0)
        _ioctl(sock, ifname, buf)

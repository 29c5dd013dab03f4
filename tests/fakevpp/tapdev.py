"""The kernel end of a fake TAP: a real tap device, so the pod side can be configured on it.

VPP creates the host end of a TAP v2 interface in the namespace it is given (a path, or a name
under /var/run/netns) under the requested name; the fake does the same with a persistent tap.
"""

from __future__ import annotations

import os

from pyroute2 import IPRoute, NetlinkError


def netns_path(netns: str) -> str:
    """VPP accepts a path or a name under /var/run/netns for `host_namespace`."""
    return netns if netns.startswith("/") else os.path.join("/var/run/netns", netns)


def _open(netns: str) -> IPRoute:
    if not netns:
        return IPRoute()  # the fake's own namespace
    # flags=0: a missing namespace is an error, not silently created.
    return IPRoute(netns=netns_path(netns), flags=0)


def create_tap_host(ifname: str, netns: str, mac: str, mtu: int) -> bool:
    """Creates the tap; False when the namespace or the name is not usable (VPP: syscall error)."""
    try:
        with _open(netns) as ipr:
            ipr.link("add", ifname=ifname, kind="tuntap", mode="tap")
            try:
                index = ipr.link_lookup(ifname=ifname)[0]
                ipr.link("set", index=index, address=mac, mtu=mtu)
            except (OSError, NetlinkError, IndexError):
                ipr.link("del", ifname=ifname)  # no half-made device left behind
                raise
    except (OSError, NetlinkError, IndexError):
        return False
    return True


def link_exists(ifname: str, netns: str) -> bool:
    """Whether `ifname` exists in `netns` ("" = the fake's namespace)."""
    try:
        with _open(netns) as ipr:
            return bool(ipr.link_lookup(ifname=ifname))
    except (OSError, NetlinkError):
        return False


def delete_tap_host(ifname: str, netns: str) -> None:
    """Removes the tap if it is still there (its namespace may be gone already)."""
    try:
        with _open(netns) as ipr:
            for index in ipr.link_lookup(ifname=ifname):
                ipr.link("del", index=index)
    except (OSError, NetlinkError):
        pass

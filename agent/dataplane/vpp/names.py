"""Deterministic MACs and owner tags, derived from the pod key.

The MACs come from a hash of the key, and every VPP interface (and every pod's veth host end, in
its alias) carries its owner in its tag, so a restarted agent finds a pod's objects again. VPP
tags hold 63 characters; a container ID is often 64, so a tag that would not fit keeps the ID's
head and a hash of the whole key (still unique and recomputable). The veth host end's name is
not derived from the key any more (agent/dataplane/vpp/podlinks: VPP keeps every name it saw).
"""

from __future__ import annotations

import hashlib
import ipaddress
import os

from agent.model.pod import PodKey

POD_TAG_PREFIX = "vswitch-cni:"  # vswitch-cni:<container_id>:<ifname>
BASE_TAG_PREFIX = "vswitch-cni/"  # the driver's own objects (gateway loopback, host link)
GATEWAY_TAG = BASE_TAG_PREFIX + "pod-gateway"
HOST_TAG = BASE_TAG_PREFIX + "host-interconnect"
# veth + AF_PACKET pairs that belong to no pod (agent/dataplane/vpp/podpool): a ready spare,
# and a deleted pod's pair waiting for its background delete. Never a pod tag's prefix.
SPARE_TAG = BASE_TAG_PREFIX + "spare"
RETIRED_TAG = BASE_TAG_PREFIX + "retired"
TAG_MAX = 63  # sw_interface_tag_add_del.tag is a string[64], NUL included


def pod_tag(key: PodKey) -> str:
    """The owner tag of a pod's VPP interface."""
    tag = f"{POD_TAG_PREFIX}{key.container_id}:{key.ifname}"
    if len(tag) <= TAG_MAX:
        return tag
    suffix = f"~{key.digest(12)}:{key.ifname}"
    room = TAG_MAX - len(POD_TAG_PREFIX) - len(suffix)
    return f"{POD_TAG_PREFIX}{key.container_id[:room]}{suffix}"


def digest_host_ifname(key: PodKey) -> str:
    """The name agents before issue #27 gave a pod's veth host end (14 characters): their
    records name it, and a DEL without a record still looks for it."""
    return "vsw" + key.digest(11)


def _mac(seed: str) -> str:
    raw = bytearray(hashlib.sha256(seed.encode()).digest()[:6])
    raw[0] = (raw[0] & 0xFC) | 0x02  # unicast, locally administered
    return ":".join(f"{b:02x}" for b in raw)


def pod_mac(key: PodKey) -> str:
    """The MAC of the pod's interface."""
    return _mac(f"pod\0{key.container_id}\0{key.ifname}")


def vpp_mac(key: PodKey) -> str:
    """The MAC of VPP's interface towards the pod (the pod's gateway MAC)."""
    return _mac(f"vpp\0{key.container_id}\0{key.ifname}")


def random_mac() -> str:
    """A fresh MAC (a spare's VPP interface: its pod is not known yet)."""
    return _mac(f"random\0{os.urandom(8).hex()}")


def base_mac(what: str) -> str:
    """MACs of the driver's own interfaces (stable across agent restarts)."""
    return _mac(f"base\0{what}")


def link_local(mac: str) -> ipaddress.IPv6Address:
    """The EUI-64 IPv6 link-local address Linux gives an interface with `mac`."""
    raw = bytearray(int(b, 16) for b in mac.split(":"))
    eui = bytes([raw[0] ^ 0x02, *raw[1:3], 0xFF, 0xFE, *raw[3:6]])
    return ipaddress.IPv6Address(b"\xfe\x80" + bytes(6) + eui)

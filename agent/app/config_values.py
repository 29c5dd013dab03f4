"""The config's values: each parser takes the YAML key with the raw value, so that a refusal
names both (`ConfigError(key, value, reason)`), and returns the typed value AgentConfig holds
(agent/app/config has the table of keys, the file and the checks across keys).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from agent.model.node import WIREGUARD_OVERHEAD

# the pod MTU with Encryption: wireguard and no MTUSize: a 1500-byte uplink less WireGuard's
# overhead over IPv6 (80 bytes; 60 over IPv4)
WIREGUARD_POD_MTU = 1420
# an AF_PACKET frame's own bytes before the packet: the tpacket2 header with its sockaddr_ll
# (TPACKET_ALIGN'd, 64 at most), the virtio-net header (10) and the Ethernet header (14), rounded
FRAME_HEADROOM = 128
PACKET_RING_FRAMES = 512  # frames per ring where each frame holds one packet of the MTU


class ConfigError(Exception):
    """A configuration value the agent refuses to start with."""

    def __init__(self, key: str, value: object, reason: str) -> None:
        super().__init__(f"config key {key!r} = {brief(value)}: {reason}")
        self.key = key
        self.value = value
        self.reason = reason


def brief(value: object, limit: int = 80) -> str:
    """A value as an error message shows it: scalars cut to `limit`, containers only sized.

    Never the whole value: a config's value can be huge (an alias bomb expands to gigabytes).
    """
    if isinstance(value, dict):
        return f"<a mapping of {len(value)} keys>"
    if isinstance(value, list | tuple | set):
        return f"<a list of {len(value)} items>"
    text = repr(value if isinstance(value, str | int | float | bool | None) else str(value))
    return text if len(text) <= limit else text[: limit - 5] + "...'"


def nonempty_str(key: str, v: object) -> str:
    if not isinstance(v, str) or not v:
        raise ConfigError(key, v, "must be a non-empty string")
    return v


def boolean(key: str, v: object) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(key, v, "must be true or false")
    return v


def int_range(lo: int, hi: int) -> Callable[[str, object], int]:
    def parse(key: str, v: object) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(key, v, "must be an integer")
        if not lo <= v <= hi:
            raise ConfigError(key, v, f"must be between {lo} and {hi}")
        return v

    return parse


def ring_size(key: str, v: object) -> int:
    n = int_range(1, 32768)(key, v)  # 0 is no power of two (0 & -1 == 0 let it pass)
    if n & (n - 1):
        raise ConfigError(key, v, "a TAP ring size must be a power of two (VPP refuses others)")
    return n


def seconds(key: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0.1 <= v <= 60:
        raise ConfigError(key, v, "must be a number of seconds between 0.1 and 60")
    return float(v)


def etcd_endpoints(key: str, v: object) -> tuple[str, ...]:
    """EtcdEndpoints, also as vswitchctl's --etcd gives them (a comma-separated string)."""
    items = v.split(",") if isinstance(v, str) else v
    if not isinstance(items, list | tuple) or not items:
        raise ConfigError(key, v, "must be a list of etcd URLs like http://10.0.0.1:2379 "
                                  "or https://10.0.0.1:2379")
    out = []
    for item in items:
        if not isinstance(item, str) or "://" not in item:
            raise ConfigError(key, v, f"{brief(item)} is not an etcd URL like http://10.0.0.1:2379")
        out.append(etcd_url(key, item.strip()))
    return tuple(out)


def etcd_url(key: str, url: str) -> str:
    # the rules of agent.store.parse_endpoint, checked here so that start-up never meets them
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # "http://[::1": an unclosed IPv6 bracket
        raise ConfigError(key, url, f"not a URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise ConfigError(key, url, "must be http:// or https:// (TLS: see EtcdCAFile)")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(key, url, "the port must be a number from 1 to 65535") from None
    if not parts.hostname or parts.path not in ("", "/") or port == 0:
        raise ConfigError(key, url, f"must be {parts.scheme}://HOST:PORT like "
                                    f"{parts.scheme}://10.0.0.1:2379")
    return url



def etcd_prefix(key: str, v: object) -> str:
    s = nonempty_str(key, v)
    if not s.startswith("/"):
        raise ConfigError(key, v, "must start with '/'")
    return s if s.endswith("/") else s + "/"


def abs_path(key: str, v: object) -> str:
    s = nonempty_str(key, v)
    if not os.path.isabs(s):
        raise ConfigError(key, v, "must be an absolute path")
    return s


UNIX_PATH_MAX = 107  # bytes of a unix socket path: sun_path holds 108, NUL included


def socket_path(key: str, v: object) -> str:
    s = abs_path(key, v)
    if len(s.encode()) > UNIX_PATH_MAX:
        raise ConfigError(key, v, f"a unix socket path holds at most {UNIX_PATH_MAX} bytes")
    return s


def node_ip(key: str, v: object) -> str:
    s = any_str(key, v)
    if s:
        try:
            address = ipaddress.ip_interface(s).ip
        except ValueError:
            raise ConfigError(key, v, "must be an IP address (optionally with /prefix)") from None
        why = unusable_node_ip(address)
        if why:
            raise ConfigError(key, v, why)
    return s


def unusable_node_ip(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """Why other nodes could not reach a node at `address` ("" when they can): the node IP is
    where every other node sends this node's VXLAN traffic."""
    kinds = (
        (address.is_unspecified, "is the unspecified address"),
        (address.is_loopback, "is a loopback address: every node would reach itself"),
        (address.is_multicast, "is a multicast address"),
        (address.is_link_local, "is link-local: not routed, and ambiguous without an interface"),
        (address.is_reserved, "is in reserved space, routed nowhere"),
    )
    for applies, why in kinds:
        if applies:
            return f"{why}; the node IP must be an address other nodes reach this node on"
    return ""


def http_address(key: str, v: object) -> str:
    s = nonempty_str(key, v)
    _, sep, port = s.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(key, v, "must be HOST:PORT: 127.0.0.1:9999 (this node only), "
                          "node:9999 (loopback and the node's IP), an address, or 0.0.0.0:9999 "
                          "(every address; an empty HOST too)")
    return s


NODE_HOST = "node"  # HTTPAddress host meaning loopback plus this node's own IP
ALL_ADDRESSES = ("0.0.0.0", "::")


def http_binds(address: str, node_ip: str, env: Mapping[str, str]) -> tuple[
        tuple[tuple[str, int], ...], list[str]]:
    """HTTPAddress -> the addresses to listen on, and the warnings it deserves."""
    host, _, port_text = address.rpartition(":")
    host, port = host.strip("[]") or "0.0.0.0", int(port_text)
    if host.lower() == NODE_HOST:
        ip = (node_ip or env.get("NODE_IP", "")).split("/")[0]
        if not ip:
            raise ConfigError("HTTPAddress", address, "'node' is this node's IP: set NodeIP, or "
                              "NODE_IP in the environment (the DaemonSet sets it)")
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            raise ConfigError("HTTPAddress", address, f"the node IP {ip!r} (NodeIP or NODE_IP) "
                              "is not an IP address") from None
        loopback = "::1" if ":" in ip else "127.0.0.1"
        return tuple(dict.fromkeys([(loopback, port), (ip, port)])), []
    warnings = []
    if host in ALL_ADDRESSES:
        warnings.append(f"HTTPAddress {address}: REST (no authentication) on every address of "
                        "this node, its pods' gateway included; node:PORT serves loopback and "
                        "the node's IP only")
    return ((host, port),), warnings


def dataplane(key: str, v: object) -> str:
    if v not in ("kernel", "vpp"):
        raise ConfigError(key, v, "must be 'kernel' or 'vpp'")
    return str(v)


def rx_mode(key: str, v: object) -> str:
    if v not in ("", "polling", "interrupt", "adaptive"):
        raise ConfigError(key, v, "must be 'polling', 'interrupt' or 'adaptive' (or empty: "
                          "VPP's default-rx-mode)")
    return str(v)


def vxlan_owner(key: str, v: object) -> str:
    if v not in ("linux", "vpp"):
        raise ConfigError(key, v, "must be 'linux' or 'vpp'")
    return str(v)


def encryption(key: str, v: object) -> str:
    if v not in ("off", "wireguard", "wireguard-permissive", False):  # YAML: bare off is false
        raise ConfigError(key, v, "must be 'off', 'wireguard' or 'wireguard-permissive' (for "
                          "the rollout: clear to the nodes that publish no key yet)")
    return "off" if v is False else str(v)


def wireguard_implementation(key: str, v: object) -> str:
    if v not in ("auto", "kernel", "wireguard-go"):
        raise ConfigError(key, v, "must be 'auto' (the kernel's WireGuard, else wireguard-go), "
                          "'kernel' or 'wireguard-go'")
    return str(v)


def check_encryption(values: dict[str, Any]) -> None:
    """`Encryption` needs a pod MTU that leaves room for WireGuard: without MTUSize, 1420 (a
    1500-byte uplink in either family). With `Dataplane: vpp` and `VXLANOwner: vpp`, VPP's own
    wireguard plugin encrypts (agent/dataplane/vpp/wireguard.py)."""
    mode = values.get("encryption", "off")
    if mode == "off":
        return
    values.setdefault("mtu", WIREGUARD_POD_MTU)


def _mesh_in_vpp(values: Mapping[str, Any]) -> bool:
    """Whether VPP encapsulates traffic to other nodes itself (AgentConfig.vxlan_in_vpp)."""
    return (values.get("dataplane", "kernel") == "vpp"
            and values.get("vxlan_owner", "linux") == "vpp"
            and not values.get("use_l2_interconnect", False))


def check_rings(values: dict[str, Any]) -> None:
    """With VPP's own WireGuard the pods send no GSO packets (their checksum offload, and with
    it their TSO, is off: VppConfig.pod_checksum), nor does the node into VPP: every frame of
    the AF_PACKET rings holds one packet of at most the MTU. The rings' defaults then become
    frames of that size (at least 2048 bytes) and 512 of them, 1 MiB a ring at MTU 1420: a
    64-KiB frame each would waste the memory, and the 14 or 16 of the defaults overflow at the
    first burst (docs/encryption.md, "Cost": TCP across nodes went from 0.09 to 0.4-0.5
    Gbit/s). Keys that are set stay as set."""
    if values.get("encryption", "off") == "off" or not _mesh_in_vpp(values):
        return
    largest = int(values.get("mtu", WIREGUARD_POD_MTU)) + max(WIREGUARD_OVERHEAD.values())
    values.setdefault("afpacket_frame_size", max(2048, -(-(largest + FRAME_HEADROOM) // 16) * 16))
    for key in ("afpacket_rx_frames", "afpacket_tx_frames", "afpacket_host_rx_frames",
                "afpacket_host_tx_frames"):
        values.setdefault(key, PACKET_RING_FRAMES)


def service_translation(key: str, v: object) -> str:
    if v not in ("kube-proxy", "vpp"):
        raise ConfigError(key, v, "must be 'kube-proxy' or 'vpp'")
    return str(v)


def check_service_translation(values: Mapping[str, Any]) -> None:
    """`ServiceTranslation: vpp` needs VPP and its pods' FIB in table 0 (cnat looks the backends
    up there). Its Kubernetes API is checked when the agent starts."""
    if values.get("service_translation") != "vpp":
        return
    if values.get("dataplane") != "vpp":
        raise ConfigError("ServiceTranslation", "vpp", "needs Dataplane: vpp (the kernel "
                          "dataplane leaves Services to kube-proxy)")
    if values.get("main_vrf_id", 0) != 0:
        raise ConfigError("ServiceTranslation", "vpp", f"needs MainVRFID: 0 (not "
                          f"{values['main_vrf_id']}): VPP's cnat resolves backends in table 0")


def ifname(key: str, v: object) -> str:
    s = nonempty_str(key, v)
    bad = len(s.encode()) > 15 or s in (".", "..") or any(c in "/:" or c.isspace() for c in s)
    if bad:
        raise ConfigError(
            key, v, "must be a Linux interface name (at most 15 bytes, no '/', ':' or space)"
        )
    if s == "lo":
        raise ConfigError(key, v, "the loopback interface is the node's own, not the agent's")
    return s


def host_prefix(key: str, v: object) -> str:
    s = nonempty_str(key, v)
    # The host end is the prefix plus 11 hex digits of the attachment's hash: 15 bytes at most.
    if len(s.encode()) > 4 or not s.isalnum():
        raise ConfigError(key, v, "must be 1 to 4 letters or digits")
    return s


def tap_version(key: str, v: object) -> int:
    if v != 2:
        raise ConfigError(key, v, "only TAP version 2 (virtio) exists in current VPP releases")
    return 2


def afpacket_version(key: str, v: object) -> int:
    if v not in (2, 3) or isinstance(v, bool):
        raise ConfigError(key, v, "must be 2 (TPACKET_V2) or 3 (TPACKET_V3)")
    return int(v)


def frame_size(key: str, v: object) -> int:
    n = int_range(2048, 1 << 20)(key, v)
    if n % 16:
        raise ConfigError(key, v, "must be a multiple of 16 (TPACKET_ALIGNMENT)")
    return n


def cidrs(key: str, v: object) -> tuple[str, ...]:
    items = v.split(",") if isinstance(v, str) else v
    if not isinstance(items, list | tuple):
        raise ConfigError(key, v, "must be a list of CIDRs like 10.20.0.0/16")
    out = []
    for item in items:
        try:
            out.append(str(ipaddress.ip_network(str(item).strip(), strict=False)))
        except ValueError as exc:
            raise ConfigError(key, item, f"not a CIDR: {exc}") from exc
    return tuple(out)


def nft_name(key: str, v: object) -> str:
    s = nonempty_str(key, v)
    if len(s) > 32 or not all(c.isascii() and (c.isalnum() or c in "-_") for c in s):
        raise ConfigError(key, v, "must be 1 to 32 letters, digits, '-' or '_'")
    return s


def any_str(key: str, v: object) -> str:
    if not isinstance(v, str):
        raise ConfigError(key, v, "must be a string")
    return v


# YAML key -> (AgentConfig field, parser). Lookup is by lower-cased key.

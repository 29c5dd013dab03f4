"""The agent's configuration: one YAML file (the config map), validated once at start.

Accepts Contiv-VPP's `contiv.yaml` keys with Contiv's defaults plus our own keys. Keys are
matched case-insensitively, as Contiv's Go loader did (so `UseTAPInterfaces` and
`useTAPInterfaces` both work). A Contiv key we do not implement gives a warning naming it; a key
nobody knows is refused (a typo must not silently become a default); a bad value is refused with
the key, the value and the reason. The result is one frozen `AgentConfig` passed to constructors.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from agent.state.etcd_tls import EtcdTLS, TLSFileError
from ipam import ConfigError as IPAMConfigError
from ipam import IPAMConfig


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


@dataclass(frozen=True)
class AgentConfig:
    """Everything the agent reads from its config file, typed and validated."""

    node_name: str
    # Ours.
    etcd_endpoints: tuple[str, ...] = ("http://127.0.0.1:2379",)
    etcd_prefix: str = "/vswitch-cni/"
    etcd_timeout: float = 2.0
    etcd_ca_file: str = ""
    etcd_cert_file: str = ""
    etcd_key_file: str = ""
    cni_socket: str = "/run/vswitch-cni/cni.sock"
    # Loopback by default: REST has no authentication and a pod reaches every address of its
    # node, so serving beyond the node itself is the operator's choice (`node:PORT`, an address,
    # or 0.0.0.0). http_binds is what HTTPAddress resolved to ("node" needs the node's IP).
    http_address: str = "127.0.0.1:9999"
    http_binds: tuple[tuple[str, int], ...] = ()
    http_workers: int = 4
    http_max_connections: int = 64
    http_header_timeout: float = 5.0
    dataplane: str = "kernel"
    gateway_interface: str = "vswitch0"
    host_interface_prefix: str = "vsw"
    state_dir: str = "/var/lib/vswitch-cni"
    vpp_api_socket: str = "/run/vpp/api.sock"
    vpp_api_dir: str = ""
    vpp_host_interface: str = "vpp1"
    vpp_host_peer_interface: str = "vpp2"
    workers: int = 16
    node_ip: str = ""
    afpacket_version: int = 2
    afpacket_qdisc_bypass: bool = True
    afpacket_frame_size: int = 2048 * 33
    afpacket_rx_frames: int = 20
    afpacket_tx_frames: int = 10
    nat_excluded_cidrs: tuple[str, ...] = ()
    nat_table: str = "vswitch-cni"
    vxlan_interface: str = "vxlan-vsw"
    vxlan_vni: int = 10
    # Contiv's.
    nat_external_traffic: bool = True
    use_tap_interfaces: bool = True
    tap_interface_version: int = 2
    tapv2_rx_ring_size: int = 256
    tapv2_tx_ring_size: int = 256
    mtu: int = 1450
    main_vrf_id: int = 0
    pod_vrf_id: int = 1
    use_l2_interconnect: bool = False
    ipam: IPAMConfig = field(default_factory=IPAMConfig)
    warnings: tuple[str, ...] = ()

    @property
    def etcd_tls(self) -> EtcdTLS | None:
        """The TLS files for https:// etcd endpoints; None for http:// ones (parse made sure
        that all endpoints are the one or the other, and that the files go with https)."""
        if not self.etcd_ca_file:
            return None
        return EtcdTLS(self.etcd_ca_file, self.etcd_cert_file, self.etcd_key_file)

    @property
    def http_host_port(self) -> tuple[str, int]:
        """HTTPAddress as written: (host, port); "node" stays "node" (see rest_binds)."""
        host, _, port = self.http_address.rpartition(":")
        return host.strip("[]") or "0.0.0.0", int(port)

    @property
    def rest_binds(self) -> list[tuple[str, int]]:
        """The addresses the REST endpoint listens on."""
        return list(self.http_binds) or [self.http_host_port]


def _str(key: str, v: object) -> str:
    if not isinstance(v, str) or not v:
        raise ConfigError(key, v, "must be a non-empty string")
    return v


def _bool(key: str, v: object) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(key, v, "must be true or false")
    return v


def _int_range(lo: int, hi: int) -> Callable[[str, object], int]:
    def parse(key: str, v: object) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(key, v, "must be an integer")
        if not lo <= v <= hi:
            raise ConfigError(key, v, f"must be between {lo} and {hi}")
        return v

    return parse


def _ring(key: str, v: object) -> int:
    n = _int_range(1, 32768)(key, v)  # 0 is no power of two (0 & -1 == 0 let it pass)
    if n & (n - 1):
        raise ConfigError(key, v, "a TAP ring size must be a power of two (VPP refuses others)")
    return n


def _seconds(key: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0.1 <= v <= 60:
        raise ConfigError(key, v, "must be a number of seconds between 0.1 and 60")
    return float(v)


def _endpoints(key: str, v: object) -> tuple[str, ...]:
    items = v.split(",") if isinstance(v, str) else v
    if not isinstance(items, list | tuple) or not items:
        raise ConfigError(key, v, "must be a list of etcd URLs like http://10.0.0.1:2379 "
                                  "or https://10.0.0.1:2379")
    out = []
    for item in items:
        if not isinstance(item, str) or "://" not in item:
            raise ConfigError(key, v, f"{brief(item)} is not an etcd URL like http://10.0.0.1:2379")
        out.append(_etcd_url(key, item.strip()))
    return tuple(out)


def _etcd_url(key: str, url: str) -> str:
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


def _check_etcd_tls(values: Mapping[str, Any]) -> None:
    """The rules across the etcd keys: one TLS setting serves every endpoint, so the endpoints
    are all http:// or all https://; https:// needs the CA; a client certificate comes with its
    key; TLS files beside http:// endpoints would be silently unused, so they are refused."""
    endpoints = values.get("etcd_endpoints", AgentConfig.etcd_endpoints)
    schemes = {urlsplit(url).scheme for url in endpoints}
    if len(schemes) > 1:
        raise ConfigError("EtcdEndpoints", list(endpoints), "mixes http:// and https:// "
                          "endpoints: one TLS setting serves all of them, so all must be https:// "
                          "(or all http://)")
    cert, key = values.get("etcd_cert_file", ""), values.get("etcd_key_file", "")
    if bool(cert) != bool(key):
        given, missing = ("EtcdCertFile", "EtcdKeyFile") if cert else ("EtcdKeyFile",
                                                                      "EtcdCertFile")
        raise ConfigError(given, cert or key, f"is set without {missing}: the client "
                          "certificate and its private key go together (set both, or neither)")
    ca = values.get("etcd_ca_file", "")
    if schemes == {"https"} and not ca:
        raise ConfigError("EtcdCAFile", "", "must be set for https:// EtcdEndpoints: the CA "
                          "certificate(s) that etcd's server certificate chains to")
    if schemes == {"http"}:
        for name, fname in (("EtcdCAFile", "etcd_ca_file"), ("EtcdCertFile", "etcd_cert_file"),
                            ("EtcdKeyFile", "etcd_key_file")):
            if values.get(fname):
                raise ConfigError(name, values[fname], "is set but EtcdEndpoints are http://: "
                                  "TLS needs https:// endpoints (or remove the TLS keys)")


def check_etcd_tls(cfg: AgentConfig) -> None:
    """Reads and checks the etcd TLS files (readable, PEM, the key the certificate's) before
    anything connects; a bad one is refused by key, file and reason."""
    tls = cfg.etcd_tls
    if tls is None:
        return
    try:
        tls.read()
    except TLSFileError as exc:
        # the file is the news: named in full also where the value shown is cut short
        whole = "" if brief(exc.path) == repr(exc.path) else f" (file {exc.path})"
        raise ConfigError(exc.key, exc.path, exc.reason + whole) from None


def etcd_endpoints(key: str, v: object) -> tuple[str, ...]:
    """Validates etcd endpoints given elsewhere than in the file (vswitchctl's --etcd)."""
    return _endpoints(key, v)


def etcd_prefix(key: str, v: object) -> str:
    """Validates an etcd prefix given elsewhere than in the file (vswitchctl's --prefix)."""
    return _prefix(key, v)


def _prefix(key: str, v: object) -> str:
    s = _str(key, v)
    if not s.startswith("/"):
        raise ConfigError(key, v, "must start with '/'")
    return s if s.endswith("/") else s + "/"


def _abs_path(key: str, v: object) -> str:
    s = _str(key, v)
    if not os.path.isabs(s):
        raise ConfigError(key, v, "must be an absolute path")
    return s


UNIX_PATH_MAX = 107  # bytes of a unix socket path: sun_path holds 108, NUL included


def _socket_path(key: str, v: object) -> str:
    s = _abs_path(key, v)
    if len(s.encode()) > UNIX_PATH_MAX:
        raise ConfigError(key, v, f"a unix socket path holds at most {UNIX_PATH_MAX} bytes")
    return s


def _node_ip(key: str, v: object) -> str:
    s = _any_str(key, v)
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


def _http_address(key: str, v: object) -> str:
    s = _str(key, v)
    _, sep, port = s.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(key, v, "must be HOST:PORT: 127.0.0.1:9999 (this node only), "
                          "node:9999 (loopback and the node's IP), an address, or 0.0.0.0:9999 "
                          "(every address; an empty HOST too)")
    return s


NODE_HOST = "node"  # HTTPAddress host meaning loopback plus this node's own IP
ALL_ADDRESSES = ("0.0.0.0", "::")


def _http_binds(address: str, node_ip: str, env: Mapping[str, str]) -> tuple[
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


def _dataplane(key: str, v: object) -> str:
    if v not in ("kernel", "vpp"):
        raise ConfigError(key, v, "must be 'kernel' or 'vpp'")
    return str(v)


def _ifname(key: str, v: object) -> str:
    s = _str(key, v)
    bad = len(s.encode()) > 15 or s in (".", "..") or any(c in "/:" or c.isspace() for c in s)
    if bad:
        raise ConfigError(
            key, v, "must be a Linux interface name (at most 15 bytes, no '/', ':' or space)"
        )
    if s == "lo":
        raise ConfigError(key, v, "the loopback interface is the node's own, not the agent's")
    return s


def _host_prefix(key: str, v: object) -> str:
    s = _str(key, v)
    # The host end is the prefix plus 11 hex digits of the attachment's hash: 15 bytes at most.
    if len(s.encode()) > 4 or not s.isalnum():
        raise ConfigError(key, v, "must be 1 to 4 letters or digits")
    return s


def _tap_version(key: str, v: object) -> int:
    if v != 2:
        raise ConfigError(key, v, "only TAP version 2 (virtio) exists in current VPP releases")
    return 2


def _afpacket_version(key: str, v: object) -> int:
    if v not in (2, 3) or isinstance(v, bool):
        raise ConfigError(key, v, "must be 2 (TPACKET_V2) or 3 (TPACKET_V3)")
    return int(v)


def _frame_size(key: str, v: object) -> int:
    n = _int_range(2048, 1 << 20)(key, v)
    if n % 16:
        raise ConfigError(key, v, "must be a multiple of 16 (TPACKET_ALIGNMENT)")
    return n


def _cidrs(key: str, v: object) -> tuple[str, ...]:
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


def _nft_name(key: str, v: object) -> str:
    s = _str(key, v)
    if len(s) > 32 or not all(c.isascii() and (c.isalnum() or c in "-_") for c in s):
        raise ConfigError(key, v, "must be 1 to 32 letters, digits, '-' or '_'")
    return s


def _any_str(key: str, v: object) -> str:
    if not isinstance(v, str):
        raise ConfigError(key, v, "must be a string")
    return v


# YAML key -> (AgentConfig field, parser). Lookup is by lower-cased key.
_KEYS: dict[str, tuple[str, str, Callable[[str, object], Any]]] = {
    k.lower(): (k, f, p)
    for k, f, p in [
        ("NodeName", "node_name", _str),
        ("NodeIP", "node_ip", _node_ip),
        ("EtcdEndpoints", "etcd_endpoints", _endpoints),
        ("EtcdPrefix", "etcd_prefix", _prefix),
        ("EtcdTimeout", "etcd_timeout", _seconds),
        ("EtcdCAFile", "etcd_ca_file", _abs_path),
        ("EtcdCertFile", "etcd_cert_file", _abs_path),
        ("EtcdKeyFile", "etcd_key_file", _abs_path),
        ("CNISocket", "cni_socket", _socket_path),
        ("HTTPAddress", "http_address", _http_address),
        ("HTTPWorkers", "http_workers", _int_range(1, 64)),
        ("HTTPMaxConnections", "http_max_connections", _int_range(1, 4096)),
        ("HTTPHeaderTimeout", "http_header_timeout", _seconds),
        ("Dataplane", "dataplane", _dataplane),
        ("GatewayInterface", "gateway_interface", _ifname),
        ("HostInterfacePrefix", "host_interface_prefix", _host_prefix),
        ("StateDir", "state_dir", _abs_path),
        ("VPPAPISocket", "vpp_api_socket", _abs_path),
        ("VPPAPIDir", "vpp_api_dir", _any_str),
        ("VPPHostInterface", "vpp_host_interface", _ifname),
        ("VPPHostPeerInterface", "vpp_host_peer_interface", _ifname),
        ("Workers", "workers", _int_range(1, 256)),
        ("AfPacketVersion", "afpacket_version", _afpacket_version),
        ("AfPacketQdiscBypass", "afpacket_qdisc_bypass", _bool),
        ("AfPacketFrameSize", "afpacket_frame_size", _frame_size),
        ("AfPacketRxFrames", "afpacket_rx_frames", _int_range(2, 4096)),
        ("AfPacketTxFrames", "afpacket_tx_frames", _int_range(2, 4096)),
        ("NatExternalTraffic", "nat_external_traffic", _bool),
        ("NatExcludedCIDRs", "nat_excluded_cidrs", _cidrs),
        ("NatTable", "nat_table", _nft_name),
        ("UseTAPInterfaces", "use_tap_interfaces", _bool),
        ("TAPInterfaceVersion", "tap_interface_version", _tap_version),
        ("TAPv2RxRingSize", "tapv2_rx_ring_size", _ring),
        ("TAPv2TxRingSize", "tapv2_tx_ring_size", _ring),
        ("MTUSize", "mtu", _int_range(576, 9216)),
        ("MainVRFID", "main_vrf_id", _int_range(0, 2**32 - 1)),
        ("PodVRFID", "pod_vrf_id", _int_range(0, 2**32 - 1)),
        ("UseL2Interconnect", "use_l2_interconnect", _bool),
        ("VXLANInterface", "vxlan_interface", _ifname),
        ("VXLANVNI", "vxlan_vni", _int_range(1, 2**24 - 1)),
    ]
}

# Contiv keys that exist in contiv.yaml but that this agent does not implement (yet): accepted
# with a warning naming them, so an operator's existing config map still loads.
_CONTIV_UNIMPLEMENTED = {
    k.lower(): k
    for k in [
        "UseNoOverlay",
        "UseSRv6ForServices",
        "UseSRv6ForServiceFunctionChaining",
        "UseDX6ForSrv6NodetoNodeTransport",
        "ScanIPNeighbors",
        "IPNeighborScanInterval",
        "IPNeighborStaleThreshold",
        "EnablePacketTrace",
        "CRDNodeConfiguration",
        "ServiceLocalEndpointWeight",
        "DisableNATVirtualReassembly",
        "StealFirstNIC",
        "StealInterface",
        "STNSocketFile",
        "STNVersion",
        "NodeConfig",
        "RoutingConfig",
        "InterfaceRxMode",
        "TCPChecksumOffloadDisabled",
        "TCPstackDisabled",
        "EnableGSO",
        "PrimaryDNS",
        "SecondaryDNS",
        "UseTAPInterfacesForPodsOnly",
    ]
}


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader minus what a config has no use for and an attacker has: anchors and
    aliases (a 476-byte alias bomb expands to gigabytes) and repeated keys (which YAML resolves
    silently to the last; keys here are case-insensitive, so `MTUSize` and `mtusize` repeat)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None, None, "anchors and aliases (& and *) are not allowed", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[str, str] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key.lower() in seen:
                value = value_node.value if isinstance(value_node, yaml.ScalarNode) else "..."
                line = key_node.start_mark.line + 1
                raise ConfigError(key, value, _twice(seen[key.lower()], key, f" (line {line})"))
            seen[key.lower()] = key
        return super().construct_mapping(node, deep)


def _twice(first: str, again: str, where: str = "") -> str:
    return f"given twice, as {first!r} and {again!r}{where}: keys are case-insensitive"


def load(path: str | Path, env: Mapping[str, str] | None = None) -> AgentConfig:
    """Reads and validates the YAML config file; raises ConfigError naming the bad key."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError("--config", str(path), f"cannot read: {exc.strerror}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        reason = f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start}"
        raise ConfigError("--config", str(path), reason) from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader, stricter
    except yaml.YAMLError as exc:
        raise ConfigError("--config", str(path), f"not valid YAML: {exc}") from exc
    except RecursionError:
        raise ConfigError("--config", str(path), "not valid YAML: nested too deeply") from None
    return parse(data if data is not None else {}, env)


def _refuse_repeats(data: Mapping[object, object], where: str = "") -> None:
    seen: dict[str, str] = {}
    for raw_key in data:
        key = str(raw_key)
        if key.lower() in seen:
            raise ConfigError(where + key, data[raw_key], _twice(seen[key.lower()], key))
        seen[key.lower()] = key


def parse(data: object, env: Mapping[str, str] | None = None) -> AgentConfig:
    """Validates a decoded config document (a mapping of Contiv's and our keys)."""
    if not isinstance(data, dict):
        raise ConfigError("<top level>", data, "the config must be a YAML mapping of keys")
    env = os.environ if env is None else env
    _refuse_repeats(data)
    values: dict[str, Any] = {}
    warnings: list[str] = []
    ipam_section: object = {}
    for raw_key, value in data.items():
        key = str(raw_key)
        lower = key.lower()
        if lower == "ipamconfig":
            ipam_section = value
        elif lower in _KEYS:
            _, fname, parser = _KEYS[lower]
            values[fname] = parser(key, value)
        elif lower in _CONTIV_UNIMPLEMENTED:
            warnings.append(f"config key {key!r} is a Contiv key this agent does not implement")
        else:
            known = ", ".join(sorted(k for k, _, _ in _KEYS.values()))
            raise ConfigError(key, value, f"unknown key (known keys: IPAMConfig, {known})")
    if not isinstance(ipam_section, dict):
        raise ConfigError("IPAMConfig", ipam_section, "must be a mapping of IPAM keys")
    _refuse_repeats(ipam_section, "IPAMConfig.")
    try:
        ipam_cfg, ipam_warnings = IPAMConfig.from_mapping(ipam_section)
    except IPAMConfigError as exc:
        raise ConfigError(f"IPAMConfig.{exc.key}", exc.value, exc.reason) from exc
    warnings.extend(ipam_warnings)
    _check_etcd_tls(values)
    binds, http_warnings = _http_binds(values.get("http_address", AgentConfig.http_address),
                                       values.get("node_ip", ""), env)
    values["http_binds"] = binds
    warnings.extend(http_warnings)
    if "node_name" not in values:
        # Kubernetes passes the node name through the downward API; fall back to the hostname.
        values["node_name"] = env.get("NODE_NAME") or socket.gethostname()
    return AgentConfig(ipam=ipam_cfg, warnings=tuple(warnings), **values)


def preflight(cfg: AgentConfig) -> None:
    """Checks the config against the machine before the agent touches anything (etcd, links,
    files), so that a value that cannot work is refused at once, by key, like a malformed one:
    HTTPAddress must resolve, StateDir and the CNISocket's directory must be (or be creatable
    as) writable directories, the etcd TLS files must be usable."""
    for host, port in cfg.rest_binds:
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except (OSError, UnicodeError) as exc:
            raise ConfigError("HTTPAddress", cfg.http_address,
                              f"cannot be resolved: {exc}") from None
    _writable_dir("StateDir", cfg.state_dir, cfg.state_dir)
    _writable_dir("CNISocket", cfg.cni_socket, os.path.dirname(cfg.cni_socket))
    check_etcd_tls(cfg)


def _writable_dir(key: str, value: str, directory: str) -> None:
    """`directory`, or its nearest existing ancestor, is a directory this process may write."""
    path = Path(directory)
    while not path.exists() and not path.is_symlink() and path != path.parent:
        path = path.parent
    if not path.is_dir():
        raise ConfigError(key, value, f"{path} is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(key, value, f"{path} is not writable (read-only or not ours)")

"""The agent's configuration: one YAML file (the config map), validated once at start.

Accepts Contiv-VPP's `contiv.yaml` keys with Contiv's defaults plus our own keys. Keys are
matched case-insensitively, as Contiv's Go loader did (so `UseTAPInterfaces` and
`useTAPInterfaces` both work). A Contiv key we do not implement gives a warning naming it; a key
nobody knows is refused (a typo must not silently become a default); a bad value is refused with
the key, the value and the reason. The result is one frozen `AgentConfig` passed to constructors.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from agent.app import config_values as parsers
from agent.app.config_values import ConfigError as ConfigError
from agent.app.config_values import brief as brief
from agent.app.config_values import etcd_endpoints as etcd_endpoints
from agent.app.config_values import etcd_prefix as etcd_prefix
from agent.app.config_values import unusable_node_ip as unusable_node_ip
from agent.state.etcd_tls import EtcdTLS, TLSFileError
from ipam import ConfigError as IPAMConfigError
from ipam import IPAMConfig


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
    afpacket_rx_frames: int = 14
    afpacket_tx_frames: int = 16
    # the VPP-host interconnect's rings: one interface per node, whose transmit ring takes the
    # batches of every pod's receive ring (docs/vpp.md, "Where UDP is lost through VPP")
    afpacket_host_rx_frames: int = 16
    afpacket_host_tx_frames: int = 64
    # ready veth + AF_PACKET pairs (docs/vpp.md); 0: none; unset: 4, or 0 where the kernel
    # expedites RCU grace periods (agent/linux/rcu: a pair made in the ADD is faster then)
    vpp_pod_pool: int | None = None
    expedite_kernel_rcu: bool = False  # VPP dataplane: /sys/kernel/rcu_expedited = 1 at start
    interface_rx_mode: str = ""
    nat_excluded_cidrs: tuple[str, ...] = ()
    nat_table: str = "vswitch-cni"
    vxlan_interface: str = "vxlan-vsw"
    vxlan_vni: int = 10
    # who encapsulates the VPP dataplane's mesh traffic: Linux's VXLAN device (the kernel
    # mesh), or VPP's own tunnels (docs/vpp.md, "The node mesh with VPP")
    vxlan_owner: str = "linux"
    kube_config: str = ""  # "": the pod's service account when in a pod, else no API
    # who translates pods' ClusterIP traffic: kube-proxy on the node, or VPP's cnat plugin
    service_translation: str = "kube-proxy"
    node_removal_grace: int = 300  # seconds a node may lack its Node before it is freed
    # pod traffic between nodes: in clear (VXLAN) or WireGuard (docs/encryption.md)
    encryption: str = "off"
    wireguard_interface: str = "vswitch-wg"
    wireguard_port: int = 51820
    wireguard_implementation: str = "auto"
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
    def vxlan_in_vpp(self) -> bool:
        """True when VPP's own VXLAN tunnels carry the mesh (`Dataplane: vpp`, `VXLANOwner:
        vpp`, no L2 interconnect); otherwise Linux carries every node's mesh traffic."""
        return (self.dataplane == "vpp" and self.vxlan_owner == "vpp"
                and not self.use_l2_interconnect)

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


_KEYS: dict[str, tuple[str, str, Callable[[str, object], Any]]] = {
    k.lower(): (k, f, p)
    for k, f, p in [
        ("NodeName", "node_name", parsers.nonempty_str),
        ("NodeIP", "node_ip", parsers.node_ip),
        ("EtcdEndpoints", "etcd_endpoints", parsers.etcd_endpoints),
        ("EtcdPrefix", "etcd_prefix", parsers.etcd_prefix),
        ("EtcdTimeout", "etcd_timeout", parsers.seconds),
        ("EtcdCAFile", "etcd_ca_file", parsers.abs_path),
        ("EtcdCertFile", "etcd_cert_file", parsers.abs_path),
        ("EtcdKeyFile", "etcd_key_file", parsers.abs_path),
        ("CNISocket", "cni_socket", parsers.socket_path),
        ("HTTPAddress", "http_address", parsers.http_address),
        ("HTTPWorkers", "http_workers", parsers.int_range(1, 64)),
        ("HTTPMaxConnections", "http_max_connections", parsers.int_range(1, 4096)),
        ("HTTPHeaderTimeout", "http_header_timeout", parsers.seconds),
        ("Dataplane", "dataplane", parsers.dataplane),
        ("GatewayInterface", "gateway_interface", parsers.ifname),
        ("HostInterfacePrefix", "host_interface_prefix", parsers.host_prefix),
        ("StateDir", "state_dir", parsers.abs_path),
        ("VPPAPISocket", "vpp_api_socket", parsers.abs_path),
        ("VPPAPIDir", "vpp_api_dir", parsers.any_str),
        ("VPPHostInterface", "vpp_host_interface", parsers.ifname),
        ("VPPHostPeerInterface", "vpp_host_peer_interface", parsers.ifname),
        ("Workers", "workers", parsers.int_range(1, 256)),
        ("AfPacketVersion", "afpacket_version", parsers.afpacket_version),
        ("AfPacketQdiscBypass", "afpacket_qdisc_bypass", parsers.boolean),
        ("AfPacketFrameSize", "afpacket_frame_size", parsers.frame_size),
        ("AfPacketRxFrames", "afpacket_rx_frames", parsers.int_range(2, 4096)),
        ("AfPacketTxFrames", "afpacket_tx_frames", parsers.int_range(2, 4096)),
        ("AfPacketHostRxFrames", "afpacket_host_rx_frames", parsers.int_range(2, 4096)),
        ("AfPacketHostTxFrames", "afpacket_host_tx_frames", parsers.int_range(2, 4096)),
        ("VppPodPool", "vpp_pod_pool", parsers.int_range(0, 64)),
        ("ExpediteKernelRcu", "expedite_kernel_rcu", parsers.boolean),
        ("InterfaceRxMode", "interface_rx_mode", parsers.rx_mode),
        ("NatExternalTraffic", "nat_external_traffic", parsers.boolean),
        ("NatExcludedCIDRs", "nat_excluded_cidrs", parsers.cidrs),
        ("NatTable", "nat_table", parsers.nft_name),
        ("UseTAPInterfaces", "use_tap_interfaces", parsers.boolean),
        ("TAPInterfaceVersion", "tap_interface_version", parsers.tap_version),
        ("TAPv2RxRingSize", "tapv2_rx_ring_size", parsers.ring_size),
        ("TAPv2TxRingSize", "tapv2_tx_ring_size", parsers.ring_size),
        ("MTUSize", "mtu", parsers.int_range(576, 9216)),
        ("MainVRFID", "main_vrf_id", parsers.int_range(0, 2**32 - 1)),
        ("PodVRFID", "pod_vrf_id", parsers.int_range(0, 2**32 - 1)),
        ("UseL2Interconnect", "use_l2_interconnect", parsers.boolean),
        ("VXLANInterface", "vxlan_interface", parsers.ifname),
        ("VXLANVNI", "vxlan_vni", parsers.int_range(1, 2**24 - 1)),
        ("VXLANOwner", "vxlan_owner", parsers.vxlan_owner),
        ("KubeConfig", "kube_config", parsers.abs_path),
        ("ServiceTranslation", "service_translation", parsers.service_translation),
        ("NodeRemovalGrace", "node_removal_grace", parsers.int_range(0, 7 * 24 * 3600)),
        ("Encryption", "encryption", parsers.encryption),
        ("WireGuardInterface", "wireguard_interface", parsers.ifname),
        ("WireGuardPort", "wireguard_port", parsers.int_range(1, 65535)),
        ("WireGuardImplementation", "wireguard_implementation",
         parsers.wireguard_implementation),
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
    parsers.check_service_translation(values)
    parsers.check_encryption(values)
    parsers.check_rings(values)
    binds, http_warnings = parsers.http_binds(values.get("http_address", AgentConfig.http_address),
                                       values.get("node_ip", ""), env)
    values["http_binds"] = binds
    warnings.extend(http_warnings)
    if "node_name" not in values:
        # Kubernetes passes the node name through the downward API; fall back to the hostname.
        values["node_name"] = env.get("NODE_NAME") or socket.gethostname()
    return AgentConfig(ipam=ipam_cfg, warnings=tuple(warnings), **values)

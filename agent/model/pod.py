"""A pod attachment: its key, the CNI request that asks for it, the network the dataplane wires
and the record the agent keeps; the small state everything else is derived from.

The request (`parse` -> `CniRequest`) is decoded and validated here, once, before any state is
touched: the identity fields by the CNI spec's rules (container ID charset, interface name
limits: the fields of the key), the netns path (any absolute path the runtime gives; never
parsed), the network config JSON and CNI_ARGS, whose pod identity (K8S_POD_NAMESPACE,
K8S_POD_NAME, K8S_POD_UID) goes into the record, etcd, logs and vswitchctl's output and so must
be what Kubernetes allows. Errors name the offending variable or field, with the spec's codes (4
env, 6 decode, 7 config).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from agent.model.errors import DecodeFailure, IncompatibleVersion, InvalidConfig, InvalidEnvironment

IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def pod_label(namespace: str, name: str) -> str:
    """How logs and views name a pod. Runtimes outside Kubernetes send less than the kubelet
    (podman: K8S_POD_NAME only), so a missing part is said, never shown as `/name`."""
    if namespace and name:
        return f"{namespace}/{name}"
    if name:
        return f"{name} (no namespace)"
    return f"{namespace}/(no pod name)" if namespace else "(no pod name)"


@dataclass(frozen=True)
class PodKey:
    """A CNI attachment is identified by (container ID, interface name), per the CNI spec."""

    container_id: str
    ifname: str

    def __str__(self) -> str:
        return f"{self.container_id}/{self.ifname}"

    def digest(self, length: int = 11) -> str:
        """A short stable hex name part, used for interface names and MACs."""
        raw = f"{self.container_id}\0{self.ifname}".encode()
        return hashlib.sha256(raw).hexdigest()[:length]


@dataclass(frozen=True)
class PodNetwork:
    """What the dataplane and the pod side need to wire one attachment."""

    key: PodKey
    netns: str
    addresses: tuple[IPInterface, ...]  # pod addresses as /32 and /128
    gateways: tuple[IPAddress, ...]  # one per address family, same order as addresses
    mtu: int


@dataclass(frozen=True)
class Wiring:
    """What a dataplane driver created for a pod, stored in the pod record."""

    host_ifname: str  # host-side interface name (veth end or TAP host name)
    pod_mac: str  # MAC of the interface inside the pod
    gateway_mac: str  # MAC the pod's gateway neighbor points at
    extra: dict[str, str] = field(default_factory=dict)  # driver specifics (sw_if_index, ...)


@dataclass
class PodRecord:
    """The persisted state of one attachment (JSON in etcd)."""

    container_id: str
    ifname: str
    netns: str
    addresses: list[str]  # CIDR strings, /32 and /128
    gateways: list[str]
    pod_namespace: str = ""
    pod_name: str = ""
    pod_uid: str = ""
    cni_version: str = ""
    state: str = "adding"  # "adding" until wired, then "ready"
    wiring: dict[str, Any] = field(default_factory=dict)  # asdict(Wiring)
    mtu: int = 0
    created: float = 0.0
    # The netns's identity at ADD (agent.adding.netns_identity): "cookie:<n>", or "dev:inode" in
    # records written before cookies (the field keeps its first name: it is stored in etcd).
    netns_inode: str = ""

    @property
    def key(self) -> PodKey:
        return PodKey(self.container_id, self.ifname)

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> PodRecord:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    def network(self) -> PodNetwork:
        return PodNetwork(
            key=self.key,
            netns=self.netns,
            addresses=tuple(ipaddress.ip_interface(a) for a in self.addresses),
            gateways=tuple(ipaddress.ip_address(g) for g in self.gateways),
            mtu=self.mtu,
        )


# ---- the CNI request that asks for an attachment -----------------------------------------------

# 0.1.0 and 0.2.0 only on the wire, for Contiv's own contiv-cni (v2.0.4 advertises and may send
# them): the CNIReply has no version-specific shape, the old client renders its result itself.
# Our plugin (cni_client) starts at 0.3.0: conflists and chaining begin there.
SUPPORTED_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
_CHECK_SINCE = "0.4.0"

# CNI spec: "must start with an alphanumeric character, optionally followed by any combination
# of one or more alphanumeric characters, underscore, dot or hyphen".
_CONTAINER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
_MAX_CONFIG_BYTES = 1 << 20
# The pod identity in CNI_ARGS, at most as long as Kubernetes allows: a namespace is a DNS label
# (63), a pod name a DNS subdomain (253); a UID is a UUID (36), 128 leaves room for other
# runtimes'. Characters: Kubernetes' (lower-case letters, digits, '-', '.') and podman's (which
# sends its container name as K8S_POD_NAME: also upper case and '_'), as for container IDs.
POD_ARG_LIMITS = {"K8S_POD_NAMESPACE": 63, "K8S_POD_NAME": 253, "K8S_POD_UID": 128}
_WHAT = {"K8S_POD_NAMESPACE": "a Kubernetes namespace", "K8S_POD_NAME": "a Kubernetes pod name",
         "K8S_POD_UID": "a pod UID"}

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CniRequest:
    """A validated request; `netns` may be empty only where the verb allows it."""

    verb: str
    cni_version: str
    container_id: str
    ifname: str
    netns: str
    config: dict[str, Any]
    args: dict[str, str] = field(default_factory=dict)
    pod_uid: str = ""

    @property
    def key(self) -> PodKey:
        return PodKey(self.container_id, self.ifname)

    @property
    def pod_namespace(self) -> str:
        return self.args.get("K8S_POD_NAMESPACE", "")

    @property
    def pod_name(self) -> str:
        return self.args.get("K8S_POD_NAME", "")


def decode_config(raw: str) -> dict[str, Any]:
    """The network config from stdin: a JSON object with a supported cniVersion."""
    if len(raw) > _MAX_CONFIG_BYTES:
        raise DecodeFailure(
            "network config too large", f"{len(raw)} bytes, limit {_MAX_CONFIG_BYTES}"
        )
    try:
        config = json.loads(raw) if raw else {}
    except json.JSONDecodeError as exc:
        raise DecodeFailure("network config is not valid JSON", str(exc)) from exc
    except RecursionError:  # json's decoder recurses once per nesting level
        raise DecodeFailure("network config is not valid JSON", "nested too deeply") from None
    if not isinstance(config, dict):
        raise DecodeFailure("network config must be a JSON object")
    return config


def cni_version(config: dict[str, Any], fallback: str) -> str:
    version = config.get("cniVersion", fallback)
    if not isinstance(version, str) or not version:
        raise InvalidConfig("field cniVersion must be a non-empty string", repr(version))
    if version not in SUPPORTED_VERSIONS:
        raise IncompatibleVersion(
            f"cniVersion {version} is not supported",
            f"supported: {', '.join(SUPPORTED_VERSIONS)}",
        )
    return version


def validate_prev_result(config: dict[str, Any]) -> None:
    """CHECK compares prevResult's addresses with the record: each must be a CIDR string."""
    prev = config.get("prevResult")
    if prev is None:
        return
    if not isinstance(prev, dict):
        raise InvalidConfig("field prevResult must be an object")
    ips = prev.get("ips", [])
    if not isinstance(ips, list):
        raise InvalidConfig("field prevResult.ips must be a list")
    for i, ip in enumerate(ips):
        if not isinstance(ip, dict) or not isinstance(ip.get("address"), str):
            raise InvalidConfig(f"field prevResult.ips[{i}].address must be a string (a CIDR)")


def parse_cni_args(raw: str) -> dict[str, str]:
    """CNI_ARGS: "K1=V1;K2=V2"."""
    args: dict[str, str] = {}
    for part in filter(None, raw.split(";")):
        name, sep, value = part.partition("=")
        if not sep or not name:
            raise InvalidEnvironment("CNI_ARGS is malformed", f"{part!r} is not KEY=VALUE")
        args[name] = value
    return args


def validate_pod_arg(name: str, value: str) -> None:
    """One of POD_ARG_LIMITS' CNI_ARGS; empty is absent. Raises InvalidEnvironment (code 4)
    naming it, with the value cut short (it may be 100 KB)."""
    if not value:
        return
    limit = POD_ARG_LIMITS[name]
    if len(value) > limit:
        raise InvalidEnvironment(f"CNI_ARGS {name} is too long",
                                 f"{len(value)} characters; {_WHAT[name]} has at most {limit}")
    if not _CONTAINER_ID.fullmatch(value):
        shown = repr(value if len(value) <= 40 else value[:40] + "...")
        raise InvalidEnvironment(
            f"CNI_ARGS {name} is invalid",
            f"{shown}: must start with a letter or digit and contain only letters, digits, "
            "'_', '.' and '-'",
        )


def _pod_args(verb: str, args: dict[str, str], pod_uid: str) -> str:
    """Validates the pod identity (ADD, CHECK) or drops what is invalid (DEL: best effort, it
    needs only the container ID and ifname, and an attachment an older agent accepted must
    stay deletable); returns the pod UID (the request's field, else K8S_POD_UID)."""
    given = dict(args, K8S_POD_UID=pod_uid) if pod_uid else args
    for name in POD_ARG_LIMITS:
        try:
            validate_pod_arg(name, given.get(name, ""))
        except InvalidEnvironment as exc:
            if verb != "DEL":
                raise
            log.warning("DEL ignores %s", exc)
            args.pop(name, None)
            given.pop(name, None)
    return given.get("K8S_POD_UID", "")


def validate_container_id(container_id: str) -> None:
    if not container_id:
        raise InvalidEnvironment("CNI_CONTAINERID is empty")
    if not _CONTAINER_ID.fullmatch(container_id):
        raise InvalidEnvironment(
            "CNI_CONTAINERID is invalid",
            f"{container_id!r}: must start with a letter or digit and contain only letters, "
            "digits, '_', '.' and '-'",
        )


def validate_ifname(ifname: str) -> None:
    if not ifname:
        raise InvalidEnvironment("CNI_IFNAME is empty")
    if len(ifname.encode()) > 15:
        raise InvalidEnvironment("CNI_IFNAME is too long", f"{ifname!r}: at most 15 bytes")
    if ifname in (".", "..") or any(c in ifname for c in "/:") or any(c.isspace() for c in ifname):
        raise InvalidEnvironment(
            "CNI_IFNAME is invalid", f"{ifname!r}: no '/', ':' or white space, not '.' or '..'"
        )


def validate_netns(netns: str, required: bool) -> None:
    if not netns:
        if required:
            raise InvalidEnvironment("CNI_NETNS is empty")
        return
    if not os.path.isabs(netns) or "\0" in netns:
        raise InvalidEnvironment("CNI_NETNS must be an absolute path", repr(netns))


def parse(
    verb: str,
    *,
    version: str,
    container_id: str,
    netns: str,
    ifname: str,
    config_json: str,
    cni_args: str,
    pod_uid: str = "",
) -> CniRequest:
    """Validates a request for ADD, DEL or CHECK; raises a CniError naming what is wrong."""
    config = decode_config(config_json)
    cversion = cni_version(config, version or "0.3.1")
    validate_container_id(container_id)
    validate_ifname(ifname)
    validate_netns(netns, required=verb in ("ADD", "CHECK"))
    if verb == "CHECK" and SUPPORTED_VERSIONS.index(cversion) < SUPPORTED_VERSIONS.index(
            _CHECK_SINCE):
        raise IncompatibleVersion(f"CHECK needs cniVersion {_CHECK_SINCE} or later",
                                  f"the config says {cversion}")
    if verb == "CHECK":
        validate_prev_result(config)
    args = parse_cni_args(cni_args)
    uid = _pod_args(verb, args, pod_uid)
    return CniRequest(verb, cversion, container_id, ifname, netns, config, args, uid)

"""Decoding and validation of one CNI request as it arrives over gRPC.

Everything the runtime sent is checked here, once, before any state is touched: the identity
fields by the CNI spec's rules (container ID charset, interface name limits), the netns path
(any absolute path the runtime gives; never parsed), the network config JSON and CNI_ARGS.
Errors name the offending variable or field, with the spec's codes (4 env, 6 decode, 7 config).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from agent.errors import DecodeFailure, IncompatibleVersion, InvalidConfig, InvalidEnvironment
from agent.model import PodKey

# 0.1.0 and 0.2.0 only on the wire, for Contiv's own contiv-cni (v2.0.4 advertises and may send
# them): the CNIReply has no version-specific shape, the old client renders its result itself.
# Our plugin (cni_client) starts at 0.3.0: conflists and chaining begin there.
SUPPORTED_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
_CHECK_SINCE = "0.4.0"

# CNI spec: "must start with an alphanumeric character, optionally followed by any combination
# of one or more alphanumeric characters, underscore, dot or hyphen".
_CONTAINER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
_MAX_CONFIG_BYTES = 1 << 20


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
    uid = pod_uid or args.get("K8S_POD_UID", "")
    return CniRequest(verb, cversion, container_id, ifname, netns, config, args, uid)

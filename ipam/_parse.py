"""Value parsers for the IPAM config, and the IPAM error types.

Each parser takes the YAML key with the raw value so that a refusal names both. The errors are
IPAM's own (IPAM imports nothing of the agent); each carries the CNI error code the spec gives
its kind, which the agent answers with where it translates them: `ConfigError` is code 7
(invalid config), `Exhausted` is code 100 (IPAM failure).
"""

from __future__ import annotations

import ipaddress

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class IPAMError(Exception):
    """Any refusal of IPAM's; `code` is the CNI error code it stands for."""

    code = 999


class ConfigError(IPAMError, ValueError):
    """A config value refused: names the key, the value and the reason."""

    code = 7  # invalid config

    def __init__(self, key: str, value: object, reason: str) -> None:
        super().__init__(f"IPAMConfig.{key}={value!r}: {reason}")
        self.key = key
        self.value = value
        self.reason = reason


class Exhausted(IPAMError):
    """No free address is left in a node's pod subnet."""

    code = 100  # IPAM failure


def parse_network(key: str, raw: object) -> IPNetwork:
    if not isinstance(raw, str):
        raise ConfigError(key, raw, "must be a CIDR string such as 10.1.0.0/16")
    try:
        return ipaddress.ip_network(raw.strip(), strict=True)
    except ValueError as exc:
        # strict=True refuses host bits: say so, a typo there silently moves every subnet
        raise ConfigError(key, raw, f"not a network address in CIDR form ({exc})") from exc


def parse_gateway(key: str, raw: object) -> IPAddress:
    if not isinstance(raw, str):
        raise ConfigError(key, raw, "must be an IP address string")
    try:
        return ipaddress.ip_address(raw.strip())
    except ValueError as exc:
        raise ConfigError(key, raw, "not an IP address") from exc


def parse_prefix_len(key: str, raw: object) -> int:
    # bool is an int in Python: refuse it explicitly, `true` is never a prefix length
    if isinstance(raw, bool):
        raise ConfigError(key, raw, "must be an integer prefix length")
    if isinstance(raw, str) and raw.strip().isdigit():
        raw = int(raw.strip())
    if not isinstance(raw, int):
        raise ConfigError(key, raw, "must be an integer prefix length")
    if not 0 < raw <= 128:
        raise ConfigError(key, raw, "must be between 1 and 32 (IPv4) or 128 (IPv6)")
    return raw


def parse_bool(key: str, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise ConfigError(key, raw, "must be true or false")

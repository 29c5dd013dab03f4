"""Value parsers for the IPAM config, and the IPAM error types.

Each parser takes the YAML key with the raw value so that a refusal names both. The errors derive
from the agent's CNI error tree (a pure module), so a caller gets the right CNI code for free:
`ConfigError` is code 7 (invalid config), `Exhausted` is code 100 (IPAM failure).
"""

from __future__ import annotations

import ipaddress

from agent.errors import InvalidConfig, IPAMFailure

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class ConfigError(InvalidConfig, ValueError):
    """A config value refused: names the key, the value and the reason."""

    def __init__(self, key: str, value: object, reason: str) -> None:
        super().__init__(f"IPAMConfig.{key}={value!r}: {reason}")
        self.key = key
        self.value = value
        self.reason = reason


class Exhausted(IPAMFailure):
    """No free address is left in a node's pod subnet."""


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

"""What the compiler takes: Pods, Namespaces and NetworkPolicies, as small frozen values.

Only what NetworkPolicy needs of each object is kept. The values check their own invariants
(`PolicyError` names the offending field relative to the value; `policy.parse` prefixes the path
from the object's root), so a value built in code is as valid as one parsed from the API.

Semantics are networking.k8s.io/v1's, to the letter:
- a `LabelSelector` with no terms selects everything; its terms are ANDed;
- a `Namespace` always carries the label `kubernetes.io/metadata.name` = its name (the API
  server sets it and keeps it so; here it is implied, and a different value is overridden);
- a `Peer` is pods (podSelector in the policy's namespace, namespaceSelector alone: every pod of
  the matching namespaces, both: ANDed) or one ipBlock, never both, never neither;
- `PolicyRule.peers` empty means every peer, `PolicyRule.ports` empty every port of every
  protocol (not only TCP/UDP/SCTP);
- `NetworkPolicy.policy_types` left out defaults as the API server does: Ingress always, Egress
  when the policy has egress rules.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, NamedTuple, get_args

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Protocol = Literal["TCP", "UDP", "SCTP"]
Direction = Literal["Ingress", "Egress"]
Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]

PROTOCOLS: tuple[Protocol, ...] = get_args(Protocol)
DIRECTIONS: tuple[Direction, ...] = get_args(Direction)
OPERATORS: tuple[Operator, ...] = get_args(Operator)
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

# IANA_SVC_NAME, the form of a port name (k8s.io/apimachinery validation.IsValidPortName)
_PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


class PolicyError(ValueError):
    """Malformed input: `field` is the path to the offending value, `reason` what is wrong."""

    def __init__(self, field: str, value: object, reason: str, obj: str = "") -> None:
        self.field = field
        self.value = value
        self.reason = reason
        self.obj = obj  # the object, e.g. "NetworkPolicy default/web", when known
        shown = f"{field}={value!r}" if field else repr(value)
        super().__init__(f"{obj}: {shown}: {reason}" if obj else f"{shown}: {reason}")

    def under(self, prefix: str, obj: str = "") -> PolicyError:
        """The same error with `prefix` (a path from the object's root) put before its field."""
        return PolicyError(join_path(prefix, self.field), self.value, self.reason,
                           obj or self.obj)


def join_path(prefix: str, rest: str) -> str:
    if not prefix or not rest:
        return prefix or rest
    return f"{prefix}{rest}" if rest.startswith("[") else f"{prefix}.{rest}"


def check_port_name(where: str, name: str) -> None:
    if len(name) > 15 or "--" in name or not _PORT_NAME.match(name):
        raise PolicyError(where, name, "a port name is 1-15 lowercase letters, digits and '-' "
                          "with at least one letter, no '-' at either end and no '--'")


def check_port_number(where: str, number: object) -> int:
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= 65535:
        raise PolicyError(where, number, "must be a port number between 1 and 65535")
    return number


def check_protocol(where: str, protocol: object) -> Protocol:
    for known in PROTOCOLS:
        if protocol == known:
            return known
    raise PolicyError(where, protocol, f"unknown protocol: must be one of {', '.join(PROTOCOLS)}")


def check_operator(where: str, operator: object) -> Operator:
    for known in OPERATORS:
        if operator == known:
            return known
    raise PolicyError(where, operator, f"unknown operator: must be one of {', '.join(OPERATORS)}")


def _frozen(labels: Mapping[str, str], where: str) -> Mapping[str, str]:
    for key, value in labels.items():
        if not isinstance(key, str) or not key or not isinstance(value, str):
            raise PolicyError(f"{where}[{key!r}]", value, "labels map non-empty strings to strings")
    return MappingProxyType(dict(sorted(labels.items())))


@dataclass(frozen=True)
class Requirement:
    """One matchExpressions term."""

    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        check_operator("operator", self.operator)
        if not isinstance(self.key, str) or not self.key:
            raise PolicyError("key", self.key, "must be a non-empty label key")
        needs_values = self.operator in ("In", "NotIn")
        if needs_values and not self.values:
            raise PolicyError("values", [], f"must be non-empty when operator is {self.operator}")
        if not needs_values and self.values:
            raise PolicyError("values", sorted(self.values),
                              f"must be empty when operator is {self.operator}")

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        return (value is not None) == (self.operator == "Exists")


@dataclass(frozen=True)
class LabelSelector:
    """matchLabels and matchExpressions, ANDed; no terms at all selects everything."""

    match_labels: frozenset[tuple[str, str]] = frozenset()
    match_expressions: frozenset[Requirement] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and \
            all(r.matches(labels) for r in self.match_expressions)


EVERYTHING = LabelSelector()


@dataclass(frozen=True)
class ContainerPort:
    """A container port of a pod; only named ones matter to NetworkPolicy."""

    name: str
    port: int
    protocol: Protocol = "TCP"

    def __post_init__(self) -> None:
        check_port_name("name", self.name)
        check_port_number("containerPort", self.port)
        check_protocol("protocol", self.protocol)


class PodKey(NamedTuple):
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Pod:
    """A pod as policy sees it. `ips` empty: not yet (or no longer) holding an address; its
    rules are still compiled (an ADD needs them before the API knows the pod's IP). A
    host-network pod is outside NetworkPolicy: it is neither selected nor a peer."""

    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ips: tuple[IPAddress, ...] = ()
    node: str = ""
    ports: tuple[ContainerPort, ...] = ()
    host_network: bool = False
    terminated: bool = False  # Succeeded or Failed: it will not run (or need rules) again

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", _frozen(self.labels, "labels"))

    @functools.cached_property
    def key(self) -> PodKey:  # asked for every pod of the cluster on every compile
        return PodKey(self.namespace, self.name)


@dataclass(frozen=True)
class Namespace:
    """A namespace's labels, `kubernetes.io/metadata.name` always among them."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        labels = {**self.labels, NAMESPACE_NAME_LABEL: self.name}
        object.__setattr__(self, "labels", _frozen(labels, "labels"))


@dataclass(frozen=True)
class IPBlock:
    """A CIDR less its excepts; each except must lie strictly inside the CIDR (as the API says)."""

    cidr: IPNetwork
    excepts: tuple[IPNetwork, ...] = ()

    def __post_init__(self) -> None:
        for i, net in enumerate(self.excepts):
            inside = net.version == self.cidr.version \
                and int(self.cidr.network_address) <= int(net.network_address) \
                and int(net.broadcast_address) <= int(self.cidr.broadcast_address)
            if not inside or net.prefixlen <= self.cidr.prefixlen:
                raise PolicyError(f"except[{i}]", str(net),
                                  f"must be a strict subset of cidr {self.cidr}")


@dataclass(frozen=True)
class Peer:
    """One element of `from`/`to`: pods by selectors, or an ipBlock."""

    pod_selector: LabelSelector | None = None
    namespace_selector: LabelSelector | None = None
    ip_block: IPBlock | None = None

    def __post_init__(self) -> None:
        selectors = self.pod_selector is not None or self.namespace_selector is not None
        if self.ip_block is not None and selectors:
            raise PolicyError("", "ipBlock", "may not specify both ipBlock and another peer")
        if self.ip_block is None and not selectors:
            raise PolicyError("", {}, "must specify a peer (podSelector, namespaceSelector "
                              "or ipBlock); an empty peer is invalid")


@dataclass(frozen=True)
class PolicyPort:
    """A protocol and a port: a number, a number range (port..end_port), a container port's
    name, or none (every port of the protocol)."""

    protocol: Protocol = "TCP"
    port: int | str | None = None
    end_port: int | None = None

    def __post_init__(self) -> None:
        check_protocol("protocol", self.protocol)
        if isinstance(self.port, str):
            check_port_name("port", self.port)
        elif self.port is not None:
            check_port_number("port", self.port)
        if self.end_port is None:
            return
        if not isinstance(self.port, int):
            raise PolicyError("endPort", self.end_port, "may not be specified when port is "
                              + ("non-numeric" if self.port is not None else "not specified"))
        check_port_number("endPort", self.end_port)
        if self.end_port < self.port:
            raise PolicyError("endPort", self.end_port, f"must be >= port ({self.port})")


@dataclass(frozen=True)
class PolicyRule:
    """One ingress or egress rule: `peers` empty = every peer, `ports` empty = all traffic."""

    peers: tuple[Peer, ...] = ()
    ports: tuple[PolicyPort, ...] = ()


@dataclass(frozen=True)
class NetworkPolicy:
    namespace: str
    name: str
    pod_selector: LabelSelector = EVERYTHING
    ingress: tuple[PolicyRule, ...] = ()
    egress: tuple[PolicyRule, ...] = ()
    policy_types: frozenset[Direction] | None = None  # None: the API server's default

    def __post_init__(self) -> None:
        types = self.policy_types
        if not types:  # missing or empty: the API server's defaulting (SetDefaults_NetworkPolicy)
            types = frozenset({"Ingress", "Egress"} if self.egress else {"Ingress"})
        for t in types:
            if t not in DIRECTIONS:
                raise PolicyError("policyTypes", t, "must be Ingress or Egress")
        object.__setattr__(self, "policy_types", frozenset(types))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def affects(self, direction: Direction) -> bool:
        return self.policy_types is not None and direction in self.policy_types

    def rules(self, direction: Direction) -> tuple[PolicyRule, ...]:
        return self.ingress if direction == "Ingress" else self.egress

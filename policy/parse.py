"""Pods, Namespaces and NetworkPolicies from their Kubernetes JSON shape (dicts, as the API or a
manifest gives them) to `policy.model` values.

Every refusal is a `PolicyError` naming the object and the path to the field, e.g.
`NetworkPolicy web/db: spec.ingress[0].from[1].ipBlock.except[0]='10.2.0.0/16': must be a strict
subset of cidr 10.1.0.0/16`. A JSON null is a missing field (the API omits empty ones); fields
the compiler does not use are ignored, as a client of a newer API must. Pure: no I/O.

Choices where the API leaves room:
- a CIDR with host bits set ("10.1.2.3/16") means its network, as the API server has always
  read it (ParseCIDRSloppy); a CIDR without a prefix length is refused;
- a Succeeded or Failed pod holds no IP any more (the IP may already be another pod's);
- a pod's named ports are those of its containers and of its restartable (sidecar) init
  containers.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from policy.model import (
    ContainerPort,
    Direction,
    IPAddress,
    IPBlock,
    IPNetwork,
    LabelSelector,
    Namespace,
    NetworkPolicy,
    Peer,
    Pod,
    PolicyError,
    PolicyPort,
    PolicyRule,
    Requirement,
    check_operator,
    check_port_number,
    check_protocol,
    join_path,
)

T = TypeVar("T")
_TERMINATED = ("Succeeded", "Failed")


def _within(path: str, build: Callable[[], T]) -> T:
    """`build()`, with any PolicyError it raises put under `path`."""
    try:
        return build()
    except PolicyError as exc:
        raise exc.under(path) from None


def _mapping(raw: object, path: str) -> Mapping[str, object]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise PolicyError(path, raw, "must be an object")
    return raw


def _list(raw: object, path: str) -> Sequence[object]:
    if raw is None:
        return ()
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence):
        raise PolicyError(path, raw, "must be a list")
    return raw


def _str(raw: object, path: str, empty: bool = False) -> str:
    if not isinstance(raw, str) or not (raw or empty):
        raise PolicyError(path, raw, "must be a " + ("string" if empty else "non-empty string"))
    return raw


def _str_map(raw: object, path: str) -> dict[str, str]:
    out = {}
    for key, value in _mapping(raw, path).items():
        out[_str(key, path)] = _str(value, join_path(path, key), empty=True)
    return out


def _meta(obj: object, kind: str, namespaced: bool) -> tuple[Mapping[str, object], str]:
    try:
        root = _mapping(obj, "")
        meta = _mapping(root.get("metadata"), "metadata")
        name = _str(meta.get("name"), "metadata.name")
        if not namespaced:
            return root, f"{kind} {name}"
        return root, f"{kind} {_str(meta.get('namespace'), 'metadata.namespace')}/{name}"
    except PolicyError as exc:
        raise exc.under("", kind) from None


def _sloppy(text: str) -> str:
    """An IPv4 address with leading zeros in its octets as the API server takes it (Kubernetes
    parses them as decimal, the old Go way: `010.1.2.3` is 10.1.2.3), else `text` itself."""
    octets = text.split(".")
    if len(octets) == 4 and all(o.isascii() and o.isdigit() for o in octets):
        return ".".join(str(int(o)) for o in octets)
    return text


def _address(raw: object, path: str) -> IPAddress:
    try:
        return ipaddress.ip_address(_sloppy(_str(raw, path)))
    except ValueError:
        raise PolicyError(path, raw, "not an IP address") from None


def _network(raw: object, path: str) -> IPNetwork:
    text = _str(raw, path)
    try:
        if "/" not in text:
            raise ValueError(text)
        address, _, length = text.partition("/")
        return ipaddress.ip_network(f"{_sloppy(address)}/{length}", strict=False)
    except ValueError:
        raise PolicyError(path, raw, "not a CIDR (an address and a prefix length, such as "
                          "10.0.0.0/8 or 2001:db8::/64)") from None


def selector(raw: object, path: str) -> LabelSelector:
    """A metav1.LabelSelector; {} selects everything."""
    m = _mapping(raw, path)
    labels = _str_map(m.get("matchLabels"), join_path(path, "matchLabels"))
    terms = []
    for i, item in enumerate(_list(m.get("matchExpressions"), join_path(path, "matchExpressions"))):
        where = join_path(path, f"matchExpressions[{i}]")
        term = _mapping(item, where)
        key = _str(term.get("key"), join_path(where, "key"))
        operator = check_operator(join_path(where, "operator"), term.get("operator"))
        values = frozenset(_str(v, join_path(where, f"values[{j}]"), empty=True)
                           for j, v in enumerate(_list(term.get("values"),
                                                       join_path(where, "values"))))
        terms.append(_within(where, lambda: Requirement(key, operator, values)))  # noqa: B023
    return LabelSelector(frozenset(labels.items()), frozenset(terms))


def _ip_block(raw: object, path: str) -> IPBlock:
    m = _mapping(raw, path)
    cidr = _network(m.get("cidr"), join_path(path, "cidr"))
    excepts = tuple(_network(e, join_path(path, f"except[{i}]"))
                    for i, e in enumerate(_list(m.get("except"), join_path(path, "except"))))
    return _within(path, lambda: IPBlock(cidr, excepts))


def _peer(raw: object, path: str) -> Peer:
    m = _mapping(raw, path)
    pods = m.get("podSelector")
    namespaces = m.get("namespaceSelector")
    block = m.get("ipBlock")
    return _within(path, lambda: Peer(
        None if pods is None else selector(pods, "podSelector"),
        None if namespaces is None else selector(namespaces, "namespaceSelector"),
        None if block is None else _ip_block(block, "ipBlock")))


def _port(raw: object, path: str) -> PolicyPort:
    m = _mapping(raw, path)
    protocol = check_protocol(join_path(path, "protocol"), m.get("protocol") or "TCP")
    port = m.get("port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int | str)):
        raise PolicyError(join_path(path, "port"), port, "must be a port number or a port name")
    end = m.get("endPort")
    if end is not None and (isinstance(end, bool) or not isinstance(end, int)):
        raise PolicyError(join_path(path, "endPort"), end, "must be a port number")
    return _within(path, lambda: PolicyPort(protocol, port, end))


def _rule(raw: object, path: str, peers_key: str) -> PolicyRule:
    m = _mapping(raw, path)
    peers_path = join_path(path, peers_key)
    ports_path = join_path(path, "ports")
    return PolicyRule(
        tuple(_peer(p, f"{peers_path}[{i}]") for i, p in enumerate(_list(m.get(peers_key),
                                                                           peers_path))),
        tuple(_port(p, f"{ports_path}[{i}]") for i, p in enumerate(_list(m.get("ports"),
                                                                           ports_path))))


def _policy_types(raw: object) -> frozenset[Direction] | None:
    types: set[Direction] = set()
    items = _list(raw, "spec.policyTypes")
    if len(items) > 2:
        raise PolicyError("spec.policyTypes", raw, "may not name more than two policy types")
    for i, item in enumerate(items):
        if item not in ("Ingress", "Egress"):
            raise PolicyError(f"spec.policyTypes[{i}]", item, "must be Ingress or Egress")
        types.add("Ingress" if item == "Ingress" else "Egress")
    return frozenset(types) or None


def policy_from_k8s(obj: object) -> NetworkPolicy:
    """A networking.k8s.io/v1 NetworkPolicy."""
    root, what = _meta(obj, "NetworkPolicy", namespaced=True)
    meta = _mapping(root.get("metadata"), "metadata")
    try:
        spec = _mapping(root.get("spec"), "spec")
        return NetworkPolicy(
            namespace=str(meta["namespace"]),
            name=str(meta["name"]),
            pod_selector=selector(spec.get("podSelector"), "spec.podSelector"),
            ingress=tuple(_rule(r, f"spec.ingress[{i}]", "from")
                          for i, r in enumerate(_list(spec.get("ingress"), "spec.ingress"))),
            egress=tuple(_rule(r, f"spec.egress[{i}]", "to")
                         for i, r in enumerate(_list(spec.get("egress"), "spec.egress"))),
            policy_types=_policy_types(spec.get("policyTypes")))
    except PolicyError as exc:
        raise exc.under("", what) from None


def namespace_from_k8s(obj: object) -> Namespace:
    """A v1 Namespace (its name and labels)."""
    root, what = _meta(obj, "Namespace", namespaced=False)
    meta = _mapping(root.get("metadata"), "metadata")
    try:
        return Namespace(str(meta["name"]), _str_map(meta.get("labels"), "metadata.labels"))
    except PolicyError as exc:
        raise exc.under("", what) from None


def _container_ports(spec: Mapping[str, object]) -> tuple[ContainerPort, ...]:
    ports = []
    containers = [(f"spec.containers[{i}]", c) for i, c in
                  enumerate(_list(spec.get("containers"), "spec.containers"))]
    containers += [(f"spec.initContainers[{i}]", c) for i, c in
                   enumerate(_list(spec.get("initContainers"), "spec.initContainers"))
                   if _mapping(c, f"spec.initContainers[{i}]").get("restartPolicy") == "Always"]
    for where, container in containers:
        plist = join_path(where, "ports")
        for j, raw in enumerate(_list(_mapping(container, where).get("ports"), plist)):
            m = _mapping(raw, f"{plist}[{j}]")
            if m.get("name") is None:
                continue  # an unnamed port is nothing to a NetworkPolicy
            where_j = f"{plist}[{j}]"
            name = _str(m.get("name"), join_path(where_j, "name"))
            number = check_port_number(join_path(where_j, "containerPort"),
                                       m.get("containerPort"))
            protocol = check_protocol(join_path(where_j, "protocol"), m.get("protocol") or "TCP")
            ports.append(_within(where_j, lambda: ContainerPort(name, number,  # noqa: B023
                                                                protocol)))  # noqa: B023
    return tuple(ports)


def _pod_ips(status: Mapping[str, object]) -> tuple[IPAddress, ...]:
    if status.get("phase") in _TERMINATED:
        return ()
    entries = _list(status.get("podIPs"), "status.podIPs")
    raws = [(f"status.podIPs[{i}].ip", _mapping(e, f"status.podIPs[{i}]").get("ip"))
            for i, e in enumerate(entries)]
    if not raws and status.get("podIP"):
        raws = [("status.podIP", status["podIP"])]
    return tuple(dict.fromkeys(_address(raw, where) for where, raw in raws))


def pod_from_k8s(obj: object) -> Pod:
    """A v1 Pod: labels, IPs, node, named container ports, hostNetwork."""
    root, what = _meta(obj, "Pod", namespaced=True)
    meta = _mapping(root.get("metadata"), "metadata")
    try:
        spec = _mapping(root.get("spec"), "spec")
        node = spec.get("nodeName") or ""
        if not isinstance(node, str):
            raise PolicyError("spec.nodeName", node, "must be a string")
        status = _mapping(root.get("status"), "status")
        return Pod(
            namespace=str(meta["namespace"]),
            name=str(meta["name"]),
            labels=_str_map(meta.get("labels"), "metadata.labels"),
            ips=_pod_ips(status),
            node=node,
            ports=_container_ports(spec),
            host_network=spec.get("hostNetwork") is True,
            terminated=status.get("phase") in _TERMINATED)
    except PolicyError as exc:
        raise exc.under("", what) from None

"""Small builders of Kubernetes objects (dicts) and of expected values for the example tests."""

from __future__ import annotations

import ipaddress
from typing import Any

from policy import (
    Compiled,
    DirectionRules,
    PodKey,
    PortRange,
    Rule,
    compile_policies,
    namespace_from_k8s,
    pod_from_k8s,
    policy_from_k8s,
)

EVERYWHERE = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))


def pod(ns: str, name: str, ip: str | list[str] | None, labels: dict[str, str] | None = None,
        ports: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    ips = [] if ip is None else [ip] if isinstance(ip, str) else ip
    return {"metadata": {"namespace": ns, "name": name, "labels": labels or {}},
            "spec": {"nodeName": extra.pop("node", "n1"), "containers": [{"ports": ports or []}],
                     **extra},
            "status": {"podIPs": [{"ip": i} for i in ips]}}


def policy(ns: str, name: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("podSelector", {})
    return {"metadata": {"namespace": ns, "name": name}, "spec": spec}


def compile_(pods: list[dict[str, Any]], policies: list[dict[str, Any]],
             namespaces: dict[str, dict[str, str]] | None = None, sctp: bool = True,
             **kw: Any) -> Compiled:
    return compile_policies(
        [pod_from_k8s(p) for p in pods],
        [namespace_from_k8s({"metadata": {"name": n, "labels": lb}})
         for n, lb in (namespaces or {}).items()],
        [policy_from_k8s(p) for p in policies], sctp=sctp, **kw)


def nets(*cidrs: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


def tcp(first: int, last: int | None = None) -> PortRange:
    return PortRange("TCP", first, first if last is None else last)


def key(name: str, ns: str = "a") -> PodKey:
    return PodKey(ns, name)


def plain(rules: DirectionRules) -> tuple[bool, tuple[Rule, ...]]:
    """A direction as (isolated, rules), without its shared form."""
    return rules.isolated, rules.rules

"""Services (v1) and EndpointSlices (discovery.k8s.io/v1) from their JSON (decoded dicts, as
the API gives them) to `services.model` values. A refusal is a ServiceError naming the object
and the field; a JSON null is a missing field; fields the model does not use are ignored.

Choices where the API leaves room:
- spec.clusterIPs is read, else spec.clusterIP (older objects); "None" (headless) and "" give
  no address;
- an endpoint whose conditions.ready is absent is ready (the API's own reading: "nil should
  be interpreted as true"); a terminating endpoint is not ready in the API already;
- an IPv4 address with leading zeros ("010.0.0.1") reads as the API server reads it (decimal).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from services.model import (
    Endpoint,
    EndpointPort,
    EndpointSlice,
    IPAddress,
    Service,
    ServiceError,
    ServicePort,
)

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def _map(raw: object, what: str, path: str) -> Mapping[str, object]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ServiceError(f"{what}: {path}={raw!r}: must be an object")
    return raw


def _list(raw: object, what: str, path: str) -> list[object]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ServiceError(f"{what}: {path}={raw!r}: must be a list")
    return raw


def _str(raw: object, what: str, path: str, default: str = "") -> str:
    if raw is None:
        return default
    if not isinstance(raw, str):
        raise ServiceError(f"{what}: {path}={raw!r}: must be a string")
    return raw


def _port(raw: object, what: str, path: str) -> int:
    if not isinstance(raw, int) or isinstance(raw, bool) or not 1 <= raw <= 65535:
        raise ServiceError(f"{what}: {path}={raw!r}: must be a port number 1..65535")
    return raw


def _address(raw: object, what: str, path: str) -> IPAddress:
    text = _str(raw, what, path)
    try:
        if "." in text and ":" not in text:  # the API server's sloppy IPv4: leading zeros
            parts = text.split(".")
            if len(parts) == 4 and all(p.isdigit() for p in parts):
                text = ".".join(str(int(p)) for p in parts)
        return ipaddress.ip_address(text)
    except ValueError:
        raise ServiceError(f"{what}: {path}={raw!r}: not an IP address") from None


def _meta(obj: Mapping[str, object], kind: str) -> tuple[str, str, Mapping[str, object]]:
    meta = _map(obj.get("metadata"), kind, "metadata")
    name = meta.get("name")
    namespace = meta.get("namespace")
    if not isinstance(name, str) or not name or not isinstance(namespace, str) or not namespace:
        raise ServiceError(f"{kind}: metadata={dict(meta)!r}: needs a namespace and a name")
    return namespace, name, meta


def service_from_k8s(obj: Mapping[str, object]) -> Service:
    """A v1 Service's JSON -> Service."""
    namespace, name, _ = _meta(obj, "Service")
    what = f"Service {namespace}/{name}"
    spec = _map(obj.get("spec"), what, "spec")
    raw_ips = _list(spec.get("clusterIPs"), what, "spec.clusterIPs")
    path = "spec.clusterIPs"
    if not raw_ips and spec.get("clusterIP") is not None:
        raw_ips, path = [spec.get("clusterIP")], "spec.clusterIP"
    ips = _addresses(raw_ips, what, path, skip=("None", ""))
    ports = []
    for i, raw in enumerate(_list(spec.get("ports"), what, "spec.ports")):
        entry = _map(raw, what, f"spec.ports[{i}]")
        node_port = entry.get("nodePort")
        ports.append(ServicePort(_str(entry.get("name"), what, f"spec.ports[{i}].name"),
                                 _str(entry.get("protocol"), what, f"spec.ports[{i}].protocol",
                                      "TCP"),
                                 _port(entry.get("port"), what, f"spec.ports[{i}].port"),
                                 0 if node_port in (None, 0) else
                                 _port(node_port, what, f"spec.ports[{i}].nodePort")))
    return Service(
        namespace, name, ips, tuple(ports),
        type=_str(spec.get("type"), what, "spec.type", "ClusterIP"),
        session_affinity=_str(spec.get("sessionAffinity"), what, "spec.sessionAffinity",
                              "None"),
        internal_traffic_local=spec.get("internalTrafficPolicy") == "Local",
        external_ips=_addresses(spec.get("externalIPs"), what, "spec.externalIPs"),
        load_balancer_ips=_ingress_ips(obj, what))


def _addresses(raw: object, what: str, path: str, skip: tuple[str, ...] = ()
               ) -> tuple[IPAddress, ...]:
    """A list of addresses, each once, in order; the `skip` values are no address (a headless
    Service's "None")."""
    out: list[IPAddress] = []
    for i, text in enumerate(_list(raw, what, path)):
        if text in skip:
            continue
        address = _address(text, what, f"{path}[{i}]")
        if address not in out:
            out.append(address)
    return tuple(out)


def _ingress_ips(obj: Mapping[str, object], what: str) -> tuple[IPAddress, ...]:
    """status.loadBalancer.ingress[].ip, but not an ingress with ipMode Proxy (the load
    balancer proxies; kube-proxy does not claim that address either) nor a hostname-only one."""
    status = _map(obj.get("status"), what, "status")
    balancer = _map(status.get("loadBalancer"), what, "status.loadBalancer")
    out: list[IPAddress] = []
    for i, raw in enumerate(_list(balancer.get("ingress"), what, "status.loadBalancer.ingress")):
        path = f"status.loadBalancer.ingress[{i}]"
        entry = _map(raw, what, path)
        if entry.get("ip") in (None, "") or entry.get("ipMode") == "Proxy":
            continue
        address = _address(entry.get("ip"), what, f"{path}.ip")
        if address not in out:
            out.append(address)
    return tuple(out)


def _endpoint(raw: object, family: str, what: str, path: str) -> Endpoint:
    entry = _map(raw, what, path)
    addresses: list[IPAddress] = []
    for i, text in enumerate(_list(entry.get("addresses"), what, f"{path}.addresses")):
        if family == "FQDN":
            continue
        address = _address(text, what, f"{path}.addresses[{i}]")
        if f"IPv{address.version}" != family:
            raise ServiceError(f"{what}: {path}.addresses[{i}]={text!r}: not an {family} "
                               "address (the slice's addressType)")
        if address not in addresses:
            addresses.append(address)
    conditions = _map(entry.get("conditions"), what, f"{path}.conditions")
    ready = conditions.get("ready")
    if ready is not None and not isinstance(ready, bool):
        raise ServiceError(f"{what}: {path}.conditions.ready={ready!r}: must be a boolean")
    return Endpoint(tuple(addresses), ready is not False,
                    _str(entry.get("nodeName"), what, f"{path}.nodeName"))


def endpointslice_from_k8s(obj: Mapping[str, object]) -> EndpointSlice:
    """A discovery.k8s.io/v1 EndpointSlice's JSON -> EndpointSlice."""
    namespace, name, meta = _meta(obj, "EndpointSlice")
    what = f"EndpointSlice {namespace}/{name}"
    labels = _map(meta.get("labels"), what, "metadata.labels")
    service = _str(labels.get(SERVICE_NAME_LABEL), what,
                   f"metadata.labels[{SERVICE_NAME_LABEL}]")
    family = _str(obj.get("addressType"), what, "addressType")
    if family not in ("IPv4", "IPv6", "FQDN"):
        raise ServiceError(f"{what}: addressType={family!r}: must be IPv4, IPv6 or FQDN")
    endpoints = tuple(_endpoint(raw, family, what, f"endpoints[{i}]")
                      for i, raw in enumerate(_list(obj.get("endpoints"), what, "endpoints")))
    ports = []
    for i, raw in enumerate(_list(obj.get("ports"), what, "ports")):
        entry = _map(raw, what, f"ports[{i}]")
        if entry.get("port") is None:  # "all ports": no port to translate to
            continue
        ports.append(EndpointPort(_str(entry.get("name"), what, f"ports[{i}].name"),
                                  _str(entry.get("protocol"), what, f"ports[{i}].protocol",
                                       "TCP"),
                                  _port(entry.get("port"), what, f"ports[{i}].port")))
    return EndpointSlice(namespace, name, service, family, endpoints, tuple(ports))

"""Services x EndpointSlices -> the translations a node renders for its pods (pure).

A translation per (address, port, protocol) of a Service, to the ready endpoints of its
slices. The addresses, each with the port a client uses there (`Translation.kind`):
- each ClusterIP, with the Service port;
- each of this node's own addresses (`node_ips`), with the port's nodePort (kube-proxy accepts
  a NodePort on every address of its node; a pod reaching another node's NodePort is that
  node's kube-proxy's business);
- each externalIP, and each LoadBalancer ingress IP of a LoadBalancer Service, with the
  Service port.

When all of these hold (otherwise the Service is left to kube-proxy on the node, which rejects
what has no endpoint):
- the Service has cluster IPs (not headless, not ExternalName);
- the port's protocol is TCP or UDP (SCTP stays with kube-proxy);
- at least one ready endpoint of the address's family serves the port: a slice of the Service
  (label kubernetes.io/service-name, same namespace), of the family's addressType, with a port
  of the same name and protocol; the backend port is the slice's (the resolved targetPort);
- for a ClusterIP with internalTrafficPolicy Local, only endpoints on `node` count. The other
  addresses are "external" to Kubernetes, where that policy does not apply, and a pod reaching
  them is sent to any endpoint whatever the externalTrafficPolicy (as kube-proxy does for
  traffic from its node's pods).

`sessionAffinity: ClientIP` makes the translation's `affinity` true (the renderer hashes the
client's address alone). Backends are unique and sorted, so equal inputs give equal
translations.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from services.model import (
    CLUSTER_IP,
    EXTERNAL_IP,
    LOAD_BALANCER,
    NODE_PORT,
    TRANSLATED_PROTOCOLS,
    Backend,
    EndpointSlice,
    IPAddress,
    Service,
    ServicePort,
    Translation,
    TranslationKey,
)


def translations(services: Iterable[Service], slices: Iterable[EndpointSlice],
                 node: str = "", node_ips: Iterable[IPAddress] = ()
                 ) -> dict[TranslationKey, Translation]:
    """The node's translations, keyed by what they match. Two Services claiming one address
    and port (an externalIP twice: the API server allows it) are resolved by "namespace/name"
    order: the first wins; within a Service, the kinds in the order above."""
    by_service: dict[tuple[str, str], list[EndpointSlice]] = defaultdict(list)
    for found in slices:
        if found.service:
            by_service[(found.namespace, found.service)].append(found)
    mine = tuple(dict.fromkeys(node_ips))
    out: dict[TranslationKey, Translation] = {}
    for service in sorted(services, key=lambda s: (s.namespace, s.name)):
        for translation in service_translations(
                service, by_service.get((service.namespace, service.name), []), node, mine):
            out.setdefault(translation.key, translation)
    return out


def _backends(service: Service, slices: list[EndpointSlice], port: ServicePort, family: str,
              node: str | None) -> tuple[Backend, ...]:
    """The ready endpoints of `family` serving `port`; with `node`, those on it only."""
    found: set[Backend] = set()
    for es in slices:
        if es.address_type != family:
            continue
        targets = [p.port for p in es.ports if p.name == port.name and p.protocol == port.protocol]
        for endpoint in es.endpoints:
            if endpoint.ready and (node is None or endpoint.node == node):
                found.update(Backend(a, t) for a in endpoint.addresses for t in targets)
    return tuple(sorted(found))


def service_translations(service: Service, slices: Iterable[EndpointSlice], node: str = "",
                         node_ips: Iterable[IPAddress] = ()) -> list[Translation]:
    """One Service's translations, from its own slices."""
    if not service.cluster_ips or service.type == "ExternalName":
        return []
    slices = list(slices)
    balancer = service.load_balancer_ips if service.type == "LoadBalancer" else ()
    name = f"{service.namespace}/{service.name}"
    affinity = service.session_affinity == "ClientIP"
    out = []
    for port in service.ports:
        if port.protocol not in TRANSLATED_PROTOCOLS:
            continue
        addresses: list[tuple[IPAddress, int, str]] = [
            *((vip, port.port, CLUSTER_IP) for vip in service.cluster_ips),
            *((ip, port.node_port, NODE_PORT) for ip in node_ips if port.node_port),
            *((ip, port.port, EXTERNAL_IP) for ip in service.external_ips),
            *((ip, port.port, LOAD_BALANCER) for ip in balancer)]
        for address, number, kind in addresses:
            local = node if kind == CLUSTER_IP and service.internal_traffic_local else None
            backends = _backends(service, slices, port, f"IPv{address.version}", local)
            if backends:
                out.append(Translation(TranslationKey(address, number, port.protocol),
                                       backends, name, kind, affinity))
    return out

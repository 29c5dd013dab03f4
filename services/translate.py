"""Services x EndpointSlices -> the ClusterIP translations a node renders (pure).

A translation per (ClusterIP, port, protocol) of a Service, to the ready endpoints of its
slices, when all of these hold (otherwise the Service is left to kube-proxy on the node, which
rejects what has no endpoint):
- the Service has cluster IPs (not headless, not ExternalName) and no ClientIP session
  affinity (a flow hash cannot keep a client on one backend across connections);
- the port's protocol is TCP or UDP (SCTP stays with kube-proxy);
- at least one ready endpoint of the ClusterIP's family serves the port: a slice of the
  Service (label kubernetes.io/service-name, same namespace), of the family's addressType,
  with a port of the same name and protocol; the backend port is the slice's (the resolved
  targetPort);
- with internalTrafficPolicy Local, only endpoints on `node` count.

NodePort, LoadBalancer and externalIPs are not translated here: only the ClusterIPs of any
Service type. Backends are unique and sorted, so equal inputs give equal translations.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from services.model import (
    TRANSLATED_PROTOCOLS,
    Backend,
    EndpointSlice,
    Service,
    Translation,
    TranslationKey,
)


def translations(services: Iterable[Service], slices: Iterable[EndpointSlice],
                 node: str = "") -> dict[TranslationKey, Translation]:
    """The node's translations, keyed by what they match. Two Services claiming one ClusterIP
    (the API server never allows it) are resolved by "namespace/name" order: the first wins."""
    by_service: dict[tuple[str, str], list[EndpointSlice]] = defaultdict(list)
    for found in slices:
        if found.service:
            by_service[(found.namespace, found.service)].append(found)
    out: dict[TranslationKey, Translation] = {}
    for service in sorted(services, key=lambda s: (s.namespace, s.name)):
        for translation in service_translations(
                service, by_service.get((service.namespace, service.name), []), node):
            out.setdefault(translation.key, translation)
    return out


def service_translations(service: Service, slices: Iterable[EndpointSlice],
                         node: str = "") -> list[Translation]:
    """One Service's translations, from its own slices."""
    if not service.cluster_ips or service.type == "ExternalName" or \
            service.session_affinity == "ClientIP":
        return []
    slices = list(slices)
    out = []
    for vip in service.cluster_ips:
        family = f"IPv{vip.version}"
        for port in service.ports:
            if port.protocol not in TRANSLATED_PROTOCOLS:
                continue
            backends: set[Backend] = set()
            for found in slices:
                if found.address_type != family:
                    continue
                targets = [p.port for p in found.ports
                           if p.name == port.name and p.protocol == port.protocol]
                for endpoint in found.endpoints:
                    if not endpoint.ready:
                        continue
                    if service.internal_traffic_local and endpoint.node != node:
                        continue
                    backends.update(Backend(a, t) for a in endpoint.addresses for t in targets)
            if backends:
                out.append(Translation(TranslationKey(vip, port.port, port.protocol),
                                       tuple(sorted(backends)),
                                       f"{service.namespace}/{service.name}"))
    return out

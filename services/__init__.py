"""Pure Service translation: Services and EndpointSlices in, the translations a node renders for
its pods (ClusterIP, NodePort on the node's addresses, externalIP, LoadBalancer IP:port/protocol
-> ready endpoints) out. No I/O and nothing of the agent: the reflector
feeds it, the VPP renderer (agent/dataplane/vpp/cnat.py) installs what it computes.

    service_from_k8s(obj), endpointslice_from_k8s(obj)       the API's JSON -> values
    Service, ServicePort, EndpointSlice, Endpoint, EndpointPort  the input values
    translations(services, slices, node, node_ips) -> {TranslationKey: Translation}
    Translation(key: TranslationKey(vip, port, protocol), backends: (Backend(address, port), ...),
                service, kind, affinity)
    ServiceError (ValueError): malformed input, naming the object and the field

docs/vpp.md ("Services translated in VPP") says what is translated and what stays with
kube-proxy.
"""

from services.model import (
    CLUSTER_IP,
    EXTERNAL_IP,
    LOAD_BALANCER,
    NODE_PORT,
    Backend,
    Endpoint,
    EndpointPort,
    EndpointSlice,
    Service,
    ServiceError,
    ServicePort,
    Translation,
    TranslationKey,
)
from services.parse import endpointslice_from_k8s, service_from_k8s
from services.translate import service_translations, translations

__all__ = [
    "CLUSTER_IP",
    "EXTERNAL_IP",
    "LOAD_BALANCER",
    "NODE_PORT",
    "Backend",
    "Endpoint",
    "EndpointPort",
    "EndpointSlice",
    "Service",
    "ServiceError",
    "ServicePort",
    "Translation",
    "TranslationKey",
    "endpointslice_from_k8s",
    "service_from_k8s",
    "service_translations",
    "translations",
]

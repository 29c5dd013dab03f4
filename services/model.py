"""The values of the Service translation model: what the agent keeps of a Service and of an
EndpointSlice, and the translation they make together. Frozen, hashable, no I/O."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

TCP, UDP, SCTP = "TCP", "UDP", "SCTP"
# What a VPP translation carries. SCTP Services stay with kube-proxy on the node: VPP's acl
# plugin cannot match SCTP ports, nftables can (the node judges them after kube-proxy's DNAT).
TRANSLATED_PROTOCOLS = (TCP, UDP)

# What a translation's address is (Translation.kind): a Service's ClusterIP, one of this node's
# own addresses with a NodePort, an externalIP, a LoadBalancer ingress IP.
CLUSTER_IP, NODE_PORT, EXTERNAL_IP, LOAD_BALANCER = (
    "cluster-ip", "node-port", "external-ip", "load-balancer")


class ServiceError(ValueError):
    """A Service or EndpointSlice the parser refuses, naming the object and the field."""


@dataclass(frozen=True)
class ServicePort:
    """One entry of a Service's spec.ports (targetPort is the endpoints' business: the
    EndpointSlice controller resolves it into the slices' ports)."""

    name: str
    protocol: str
    port: int
    node_port: int = 0  # spec.ports[].nodePort (NodePort and LoadBalancer Services); 0: none


@dataclass(frozen=True)
class Service:
    """A Service as far as its translation needs it. `cluster_ips`: spec.clusterIPs (empty for
    a headless Service, an ExternalName, or one without an address yet); `external_ips`:
    spec.externalIPs; `load_balancer_ips`: status.loadBalancer.ingress[].ip (not those with
    ipMode Proxy: the load balancer proxies, the address is not the Service's own)."""

    namespace: str
    name: str
    cluster_ips: tuple[IPAddress, ...] = ()
    ports: tuple[ServicePort, ...] = ()
    type: str = "ClusterIP"
    session_affinity: str = "None"  # "ClientIP": a client's connections go to one backend
    internal_traffic_local: bool = False  # spec.internalTrafficPolicy: Local
    external_ips: tuple[IPAddress, ...] = ()
    load_balancer_ips: tuple[IPAddress, ...] = ()


@dataclass(frozen=True)
class EndpointPort:
    name: str
    protocol: str
    port: int


@dataclass(frozen=True)
class Endpoint:
    """One endpoint of a slice: its addresses (the slice's family), whether it is ready, and
    the node it runs on ("" when the slice does not say)."""

    addresses: tuple[IPAddress, ...]
    ready: bool = True
    node: str = ""


@dataclass(frozen=True)
class EndpointSlice:
    """An EndpointSlice of a Service (`service`: its kubernetes.io/service-name label; ""
    when it has none: a slice managed by someone else for no Service, never translated)."""

    namespace: str
    name: str
    service: str
    address_type: str  # IPv4, IPv6 or FQDN
    endpoints: tuple[Endpoint, ...] = ()
    ports: tuple[EndpointPort, ...] = ()


@dataclass(frozen=True)
class Backend:
    address: IPAddress
    port: int

    def __lt__(self, other: Backend) -> bool:  # IPv4 before IPv6: sorting mixes families
        return (self.address.version, self.address, self.port) < \
            (other.address.version, other.address, other.port)

    def __str__(self) -> str:
        host = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class TranslationKey:
    """What a packet is matched on: the Service address, its port and protocol."""

    vip: IPAddress
    port: int
    protocol: str

    def __lt__(self, other: TranslationKey) -> bool:
        return (self.vip.version, self.vip, self.port, self.protocol) < \
            (other.vip.version, other.vip, other.port, other.protocol)

    def __str__(self) -> str:
        host = f"[{self.vip}]" if self.vip.version == 6 else str(self.vip)
        return f"{self.protocol} {host}:{self.port}"


@dataclass(frozen=True)
class Translation:
    """A Service address:port/protocol and the ready endpoints a new connection to it goes to
    (sorted, never empty); `service` is "namespace/name" (for logs and display); `kind` what
    the address is (CLUSTER_IP, NODE_PORT, EXTERNAL_IP, LOAD_BALANCER); `affinity`: the
    Service's ClientIP session affinity (a client's new connections go to the backend its
    earlier ones went to, as long as the backends stay the same)."""

    key: TranslationKey
    backends: tuple[Backend, ...]
    service: str = ""
    kind: str = CLUSTER_IP
    affinity: bool = False

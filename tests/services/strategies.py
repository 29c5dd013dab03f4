"""Hypothesis strategies for the Service translation model: small worlds of Services and
EndpointSlices drawn from small pools (two namespaces, three Service names, four port names,
a few addresses of each family) so that names, ports and families collide often; and the
brute-force reference the translations are compared with."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from hypothesis import strategies as st

from services import (
    Backend,
    Endpoint,
    EndpointPort,
    EndpointSlice,
    Service,
    ServicePort,
    TranslationKey,
)
from services.model import IPAddress

NAMESPACES = ["a", "b"]
NAMES = ["web", "db", "dns"]
PORT_NAMES = ["", "http", "dns", "x"]
PROTOCOLS = ["TCP", "UDP", "SCTP"]
NODES = ["n1", "n2"]
POD_IPS: list[IPAddress] = [ipaddress.ip_address(a) for a in
                            ("10.1.1.2", "10.1.1.3", "10.1.2.2", "fd00:1::2", "fd00:1::3")]


@dataclass(frozen=True)
class World:
    services: tuple[Service, ...]
    slices: tuple[EndpointSlice, ...]
    node: str
    node_ips: tuple[IPAddress, ...] = ()


service_ports = st.builds(ServicePort, st.sampled_from(PORT_NAMES), st.sampled_from(PROTOCOLS),
                          st.sampled_from([53, 80, 443]), st.sampled_from([0, 30080, 30443]))
# externalIPs and LoadBalancer IPs from one small pool (two Services claim one often); node IPs
# from another that shares an address with it (an externalIP set to a node's own address)
OUTSIDE: list[IPAddress] = [ipaddress.ip_address(a) for a in
                            ("192.0.2.1", "192.0.2.2", "2001:db8::1")]
NODE_IPS: list[IPAddress] = [ipaddress.ip_address(a) for a in
                             ("192.0.2.1", "192.168.16.1", "fd00:16::1")]
endpoint_ports = st.builds(EndpointPort, st.sampled_from(PORT_NAMES), st.sampled_from(PROTOCOLS),
                           st.sampled_from([53, 8080, 9090]))


@st.composite
def endpoints(draw: st.DrawFn, family: str) -> Endpoint:
    pool = [a for a in POD_IPS if f"IPv{a.version}" == family]
    addresses = draw(st.lists(st.sampled_from(pool), max_size=2, unique=True))
    return Endpoint(tuple(addresses), draw(st.booleans()), draw(st.sampled_from(NODES)))


@st.composite
def slices(draw: st.DrawFn) -> EndpointSlice:
    family = draw(st.sampled_from(["IPv4", "IPv6", "FQDN"]))
    eps = () if family == "FQDN" else tuple(draw(st.lists(endpoints(family), max_size=3)))
    return EndpointSlice(draw(st.sampled_from(NAMESPACES)), f"s{draw(st.integers(0, 99))}",
                         draw(st.sampled_from([*NAMES, ""])), family, eps,
                         tuple(draw(st.lists(endpoint_ports, max_size=3))))


@st.composite
def worlds(draw: st.DrawFn) -> World:
    keys = draw(st.lists(st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(NAMES)),
                         unique=True, max_size=4))
    services = []
    for i, (namespace, name) in enumerate(keys):
        # distinct ClusterIPs per Service, as the API server guarantees
        ips: list[IPAddress] = draw(st.sampled_from(
            [[], [ipaddress.ip_address(f"10.96.0.{i + 1}")],
             [ipaddress.ip_address(f"10.96.0.{i + 1}"), ipaddress.ip_address(f"fd96::{i + 1}")],
             [ipaddress.ip_address(f"fd96::{i + 1}")]]))
        services.append(Service(
            namespace, name, tuple(ips), tuple(draw(st.lists(service_ports, max_size=3,
                                                             unique_by=lambda p: p.name))),
            type=draw(st.sampled_from(["ClusterIP", "NodePort", "LoadBalancer",
                                       "ExternalName"])),
            session_affinity=draw(st.sampled_from(["None", "None", "ClientIP"])),
            internal_traffic_local=draw(st.booleans()),
            external_ips=tuple(draw(st.lists(st.sampled_from(OUTSIDE), max_size=2, unique=True))),
            load_balancer_ips=tuple(draw(st.lists(st.sampled_from(OUTSIDE), max_size=1)))))
    return World(tuple(services), tuple(draw(st.lists(slices(), max_size=5))),
                 draw(st.sampled_from(NODES)),
                 tuple(draw(st.lists(st.sampled_from(NODE_IPS), max_size=2, unique=True))))


def reference(world: World) -> dict[TranslationKey, tuple[str, str, bool, set[Backend]]]:
    """Every key with (service, kind, affinity, backends), by enumerating each condition
    literally; of two Services claiming a key the first by namespace/name wins, within one the
    ClusterIP, then nodePort, externalIP, LoadBalancer IP."""
    out: dict[TranslationKey, tuple[str, str, bool, set[Backend]]] = {}
    for s in sorted(world.services, key=lambda s: (s.namespace, s.name)):
        if s.type == "ExternalName" or not s.cluster_ips:
            continue
        for port in s.ports:
            if port.protocol == "SCTP":
                continue
            vips = [(vip, port.port, "cluster-ip") for vip in s.cluster_ips]
            if port.node_port:
                vips += [(ip, port.node_port, "node-port") for ip in world.node_ips]
            vips += [(ip, port.port, "external-ip") for ip in s.external_ips]
            if s.type == "LoadBalancer":
                vips += [(ip, port.port, "load-balancer") for ip in s.load_balancer_ips]
            for vip, number, kind in vips:
                backends = set()
                for es in world.slices:
                    if (es.namespace, es.service) != (s.namespace, s.name) or \
                            es.address_type != f"IPv{vip.version}":
                        continue
                    for ep in es.endpoints:
                        local_ok = kind != "cluster-ip" or not s.internal_traffic_local or \
                            ep.node == world.node
                        for address in ep.addresses:
                            for target in es.ports:
                                if ep.ready and local_ok and target.name == port.name and \
                                        target.protocol == port.protocol:
                                    backends.add(Backend(address, target.port))
                key = TranslationKey(vip, number, port.protocol)
                if backends and key not in out:
                    out[key] = (f"{s.namespace}/{s.name}", kind,
                                s.session_affinity == "ClientIP", backends)
    return out

"""Services x EndpointSlices -> translations.

Test plan, examples: a Service's ports map to its slices' ports by name (the resolved
targetPort), each ClusterIP to the endpoints of its own family; not-ready endpoints, slices of
other Services or namespaces, ports of another protocol are left out; no ready endpoint, SCTP,
headless and ExternalName give no translation (kube-proxy keeps them); ClientIP affinity is
carried; internalTrafficPolicy Local keeps only this node's endpoints for the ClusterIP, not
for the node's NodePorts, externalIPs and LoadBalancer IPs, each of its family; one address
claimed twice: the first by name wins.
Properties (hypothesis, tests/services/strategies.py): the result equals a brute-force
reference over every (Service, address, port, slice, endpoint, address, slice port), with the
winner's name, kind and affinity; it does not depend on the order of the inputs; backends are
sorted, unique and never empty.
"""

from __future__ import annotations

import ipaddress
import random

from hypothesis import given, settings

from services import (
    CLUSTER_IP,
    EXTERNAL_IP,
    LOAD_BALANCER,
    NODE_PORT,
    Backend,
    Endpoint,
    EndpointPort,
    EndpointSlice,
    Service,
    ServicePort,
    TranslationKey,
    translations,
)
from tests.services.strategies import World, reference, worlds

ip = ipaddress.ip_address
V4, V6 = ip("10.96.0.10"), ip("fd00:96::10")


def web(**kw: object) -> Service:
    args: dict[str, object] = {"cluster_ips": (V4, V6),
                               "ports": (ServicePort("http", "TCP", 80),
                                         ServicePort("dns", "UDP", 53))}
    args.update(kw)
    return Service("ns", "web", **args)  # type: ignore[arg-type]


def slice_(family: str, *endpoints: Endpoint, service: str = "web", namespace: str = "ns",
           ports: tuple[EndpointPort, ...] = (EndpointPort("http", "TCP", 8080),
                                              EndpointPort("dns", "UDP", 5353))
           ) -> EndpointSlice:
    return EndpointSlice(namespace, f"{service}-{family}", service, family, endpoints, ports)


A, B, C = Endpoint((ip("10.1.1.2"),), True, "n1"), Endpoint((ip("10.1.2.3"),), True, "n2"), \
    Endpoint((ip("10.1.1.4"),), False, "n1")
A6 = Endpoint((ip("fd00:1::2"),), True, "n1")


def test_ports_by_name_and_family() -> None:
    got = translations([web()], [slice_("IPv4", A, B, C), slice_("IPv6", A6)])
    assert got[TranslationKey(V4, 80, "TCP")].backends == (Backend(ip("10.1.1.2"), 8080),
                                                           Backend(ip("10.1.2.3"), 8080))
    assert got[TranslationKey(V4, 53, "UDP")].backends == (Backend(ip("10.1.1.2"), 5353),
                                                           Backend(ip("10.1.2.3"), 5353))
    assert got[TranslationKey(V6, 80, "TCP")].backends == (Backend(ip("fd00:1::2"), 8080),)
    assert got[TranslationKey(V6, 80, "TCP")].service == "ns/web"
    assert len(got) == 4


def test_other_services_namespaces_and_protocols_left_out() -> None:
    got = translations([web()], [
        slice_("IPv4", A, service="other"), slice_("IPv4", B, namespace="elsewhere"),
        slice_("IPv4", A, ports=(EndpointPort("http", "UDP", 8080),))])
    assert got == {}


def test_no_translation_without_ready_endpoints_or_for_what_kube_proxy_keeps() -> None:
    ready = [slice_("IPv4", A)]
    assert translations([web()], [slice_("IPv4", C)]) == {}
    assert translations([web(ports=(ServicePort("s", "SCTP", 9),))],
                        [slice_("IPv4", A, ports=(EndpointPort("s", "SCTP", 9),))]) == {}
    assert translations([web(cluster_ips=())], ready) == {}
    assert translations([web(type="ExternalName")], ready) == {}
    assert len(translations([web(type="LoadBalancer")], ready)) == 2
    sticky = translations([web(session_affinity="ClientIP")], ready)
    assert len(sticky) == 2 and all(t.affinity for t in sticky.values())
    assert not any(t.affinity for t in translations([web()], ready).values())


NODE4, NODE6, EXT = ip("192.168.16.1"), ip("fd00:16::1"), ip("192.0.2.7")


def test_node_ports_external_and_load_balancer_ips() -> None:
    service = web(type="LoadBalancer", internal_traffic_local=True,
                  ports=(ServicePort("http", "TCP", 80, 30080), ServicePort("dns", "UDP", 53)),
                  external_ips=(EXT,), load_balancer_ips=(ip("198.51.100.1"),))
    got = translations([service], [slice_("IPv4", A, B), slice_("IPv6", A6)], node="n2",
                       node_ips=(NODE4, NODE6))
    both = (Backend(ip("10.1.1.2"), 8080), Backend(ip("10.1.2.3"), 8080))
    assert got[TranslationKey(V4, 80, "TCP")].backends == both[1:]  # Local: n2's only
    for key in (TranslationKey(NODE4, 30080, "TCP"), TranslationKey(EXT, 80, "TCP"),
                TranslationKey(ip("198.51.100.1"), 80, "TCP")):
        assert got[key].backends == both, key
    assert got[TranslationKey(NODE6, 30080, "TCP")].backends == (Backend(ip("fd00:1::2"), 8080),)
    assert {t.kind for t in got.values()} == {CLUSTER_IP, NODE_PORT, EXTERNAL_IP, LOAD_BALANCER}
    assert TranslationKey(NODE4, 53, "UDP") not in got  # no nodePort on that port
    # LoadBalancer IPs only for type LoadBalancer
    plain = translations([web(load_balancer_ips=(ip("198.51.100.1"),))], [slice_("IPv4", A)])
    assert {t.kind for t in plain.values()} == {CLUSTER_IP}


def test_internal_traffic_local() -> None:
    service = web(internal_traffic_local=True)
    got = translations([service], [slice_("IPv4", A, B)], node="n2")
    assert got[TranslationKey(V4, 80, "TCP")].backends == (Backend(ip("10.1.2.3"), 8080),)
    assert translations([service], [slice_("IPv4", B)], node="n1") == {}


def test_one_cluster_ip_claimed_twice() -> None:
    first, second = web(), Service("ns", "zzz", (V4,), (ServicePort("http", "TCP", 80),))
    got = translations([second, first], [slice_("IPv4", A), slice_("IPv4", B, service="zzz")])
    assert got[TranslationKey(V4, 80, "TCP")].service == "ns/web"


@settings(max_examples=150, deadline=None)
@given(worlds())
def test_equals_the_reference(world: World) -> None:
    got = translations(world.services, world.slices, world.node, world.node_ips)
    assert {k: (t.service, t.kind, t.affinity, set(t.backends)) for k, t in got.items()} == \
        reference(world)
    for key, t in got.items():
        assert t.key == key
        assert t.backends and list(t.backends) == sorted(set(t.backends))
        assert key.protocol in ("TCP", "UDP")


@settings(max_examples=60, deadline=None)
@given(worlds())
def test_order_does_not_matter(world: World) -> None:
    services, slices = list(world.services), list(world.slices)
    random.Random(7).shuffle(services)
    random.Random(8).shuffle(slices)
    assert translations(services, slices, world.node, world.node_ips) == \
        translations(world.services, world.slices, world.node, world.node_ips)

"""Parsing Services and EndpointSlices from their API JSON.

Test plan: a dual-stack Service with named ports; a LoadBalancer's nodePorts, externalIPs and
ingress IPs (not ipMode Proxy, not hostname-only); the older single clusterIP field; headless and
ExternalName give no address; defaults (protocol TCP, type ClusterIP); a slice's endpoints with
ready true/false/absent, node names, a port without a number left out; refusals name the object
and the field (a bad address, a port out of range, a family that is not the slice's, a bad
addressType, a missing namespace).
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from services import (
    Endpoint,
    EndpointPort,
    ServiceError,
    ServicePort,
    endpointslice_from_k8s,
    service_from_k8s,
)


def svc(spec: dict[str, Any], name: str = "web") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name}, "spec": spec}


def eps(endpoints: list[Any], ports: list[Any], family: str = "IPv4",
        service: str | None = "web") -> dict[str, Any]:
    labels = {"kubernetes.io/service-name": service} if service else {}
    return {"metadata": {"namespace": "ns", "name": "web-abc", "labels": labels},
            "addressType": family, "endpoints": endpoints, "ports": ports}


def test_dual_stack_service_with_named_ports() -> None:
    s = service_from_k8s(svc({"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00::a"],
                              "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                                        {"name": "dns", "port": 53, "protocol": "UDP"}],
                              "type": "NodePort", "internalTrafficPolicy": "Local"}))
    assert s.cluster_ips == (ipaddress.ip_address("10.96.0.10"), ipaddress.ip_address("fd00::a"))
    assert s.ports == (ServicePort("http", "TCP", 80), ServicePort("dns", "UDP", 53))
    assert (s.type, s.session_affinity, s.internal_traffic_local) == ("NodePort", "None", True)


def test_load_balancer_node_ports_external_and_ingress_ips() -> None:
    obj = svc({"clusterIPs": ["10.96.0.10"], "type": "LoadBalancer",
               "sessionAffinity": "ClientIP", "externalIPs": ["192.0.2.7", "192.0.2.7"],
               "ports": [{"name": "http", "port": 80, "nodePort": 30080},
                         {"name": "x", "port": 81, "nodePort": None}]})
    obj["status"] = {"loadBalancer": {"ingress": [
        {"ip": "198.51.100.1"}, {"hostname": "lb.example.org"},
        {"ip": "198.51.100.2", "ipMode": "Proxy"}, {"ip": "2001:db8::1", "ipMode": "VIP"}]}}
    s = service_from_k8s(obj)
    assert s.ports == (ServicePort("http", "TCP", 80, 30080), ServicePort("x", "TCP", 81, 0))
    assert s.external_ips == (ipaddress.ip_address("192.0.2.7"),)
    assert s.load_balancer_ips == (ipaddress.ip_address("198.51.100.1"),
                                   ipaddress.ip_address("2001:db8::1"))
    assert s.session_affinity == "ClientIP"


def test_older_single_cluster_ip_and_defaults() -> None:
    s = service_from_k8s(svc({"clusterIP": "010.96.0.011", "ports": [{"port": 80}]}))
    assert s.cluster_ips == (ipaddress.ip_address("10.96.0.11"),)
    assert s.ports == (ServicePort("", "TCP", 80),)
    assert s.type == "ClusterIP"


@pytest.mark.parametrize("spec", [{"clusterIP": "None", "clusterIPs": ["None"]},
                                  {"type": "ExternalName", "externalName": "example.org"},
                                  {"clusterIP": ""}])
def test_no_cluster_address(spec: dict[str, Any]) -> None:
    assert service_from_k8s(svc(spec)).cluster_ips == ()


def test_slice_endpoints_and_ports() -> None:
    s = endpointslice_from_k8s(eps(
        [{"addresses": ["10.1.1.2"], "conditions": {"ready": True}, "nodeName": "n1"},
         {"addresses": ["10.1.1.3"], "conditions": {"ready": False}},
         {"addresses": ["10.1.2.4", "10.1.2.4"]}],
        [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "all"}]))
    assert s.service == "web" and s.address_type == "IPv4"
    assert s.endpoints == (Endpoint((ipaddress.ip_address("10.1.1.2"),), True, "n1"),
                           Endpoint((ipaddress.ip_address("10.1.1.3"),), False, ""),
                           Endpoint((ipaddress.ip_address("10.1.2.4"),), True, ""))
    assert s.ports == (EndpointPort("http", "TCP", 8080),)


def test_fqdn_slice_has_no_addresses() -> None:
    s = endpointslice_from_k8s(eps([{"addresses": ["db.example.org"]}], [], family="FQDN"))
    assert s.endpoints[0].addresses == ()


def test_slice_without_service_label() -> None:
    assert endpointslice_from_k8s(eps([], [], service=None)).service == ""


@pytest.mark.parametrize(("make", "words"), [
    (lambda: service_from_k8s(svc({"clusterIPs": ["10.96.0.300"]})),
     "Service ns/web: spec.clusterIPs[0]='10.96.0.300': not an IP address"),
    (lambda: service_from_k8s(svc({"clusterIP": "10.96.0.1", "ports": [{"port": 70000}]})),
     "spec.ports[0].port=70000"),
    (lambda: service_from_k8s({"metadata": {"name": "x"}, "spec": {}}), "needs a namespace"),
    (lambda: service_from_k8s(svc({"ports": [{"port": 80, "nodePort": 0x10000}]})),
     "spec.ports[0].nodePort=65536"),
    (lambda: service_from_k8s(svc({"externalIPs": ["198.51.100.x"]})),
     "spec.externalIPs[0]='198.51.100.x': not an IP address"),
    (lambda: service_from_k8s({**svc({}), "status": {"loadBalancer": {"ingress": [{"ip": 7}]}}}),
     "status.loadBalancer.ingress[0].ip=7"),
    (lambda: endpointslice_from_k8s(eps([{"addresses": ["fd00::1"]}], [])),
     "EndpointSlice ns/web-abc: endpoints[0].addresses[0]='fd00::1': not an IPv4 address"),
    (lambda: endpointslice_from_k8s(eps([], [], family="IPv5")), "addressType='IPv5'"),
    (lambda: endpointslice_from_k8s(eps([{"addresses": ["10.0.0.1"],
                                          "conditions": {"ready": "yes"}}], [])),
     "endpoints[0].conditions.ready='yes': must be a boolean"),
])
def test_refusals_name_the_field(make: Any, words: str) -> None:
    with pytest.raises(ServiceError, match=None) as caught:
        make()
    assert words in str(caught.value)

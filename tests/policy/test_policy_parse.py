"""Parsing the Kubernetes JSON shape: defaults, and refusals that name the object and the field.

Test plan:
- a NetworkPolicy: protocol defaults to TCP, a missing podSelector selects everything, nulls are
  missing fields, policyTypes default as the API server's (Egress only with egress rules);
- every kind of malformed input is refused with the object, the field's full path and why:
  unknown protocol, bad CIDR (and one without a prefix length), an except outside or equal to its
  cidr or of the other family, an empty peer, ipBlock beside a selector, endPort with a named or
  missing port or below port, ports out of range, a digit string as port name, selector
  operators and values, policyTypes, metadata, wrong JSON types;
- a Pod: addresses from podIPs (podIP as the fallback), none once Succeeded/Failed (then
  terminated); named ports from containers and sidecar init containers, unnamed ones skipped,
  TCP by default; hostNetwork;
  malformed addresses and ports refused by path;
- a Namespace always carries kubernetes.io/metadata.name, whatever its labels say.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from policy import (
    ContainerPort,
    LabelSelector,
    NetworkPolicy,
    PolicyError,
    PolicyPort,
    namespace_from_k8s,
    pod_from_k8s,
    policy_from_k8s,
)


def _policy(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "p"}, "spec": spec}


def test_defaults() -> None:
    got = policy_from_k8s(_policy({"ingress": [{"ports": [{"port": 80}]}], "egress": None}))
    assert got.pod_selector == LabelSelector()
    assert got.ingress[0].ports == (PolicyPort("TCP", 80),)
    assert got.ingress[0].peers == ()
    assert _types(got) == {"Ingress"}
    assert _types(policy_from_k8s(_policy({"egress": [{}]}))) == {"Ingress", "Egress"}
    assert _types(policy_from_k8s(_policy({"egress": [{}], "policyTypes": ["Egress"]}))) == \
        {"Egress"}
    assert _types(policy_from_k8s({"metadata": {"namespace": "ns", "name": "p"}})) == {"Ingress"}


def test_ipv4_with_leading_zeros_as_the_api_server_reads_it() -> None:
    got = policy_from_k8s(_block("010.0.0.0/8", "010.001.0.0/16"))
    block = got.ingress[0].peers[0].ip_block
    assert block is not None
    assert (str(block.cidr), [str(e) for e in block.excepts]) == ("10.0.0.0/8", ["10.1.0.0/16"])


def _types(policy: NetworkPolicy) -> set[str]:
    return set(policy.policy_types or ())


def _rule(peer: object = None, port: object = None) -> dict[str, Any]:
    rule: dict[str, Any] = {}
    if peer is not None:
        rule["from"] = [peer]
    if port is not None:
        rule["ports"] = [port]
    return _policy({"ingress": [rule]})


def _block(cidr: object, *excepts: object) -> dict[str, Any]:
    return _rule({"ipBlock": {"cidr": cidr, "except": list(excepts)}})


@pytest.mark.parametrize(("obj", "field", "why"), [
    (_rule(port={"protocol": "ICMP"}), "spec.ingress[0].ports[0].protocol", "unknown protocol"),
    (_rule(port={"protocol": "tcp"}), "spec.ingress[0].ports[0].protocol", "unknown protocol"),
    (_block("10.0.0.0/33"), "spec.ingress[0].from[0].ipBlock.cidr", "not a CIDR"),
    (_block("10.0.0.0"), "spec.ingress[0].from[0].ipBlock.cidr", "not a CIDR"),
    (_block("nonsense"), "spec.ingress[0].from[0].ipBlock.cidr", "not a CIDR"),
    (_block(None), "spec.ingress[0].from[0].ipBlock.cidr", "non-empty string"),
    (_block("10.0.0.0/16", "10.0.0.0/16"), "spec.ingress[0].from[0].ipBlock.except[0]",
     "strict subset"),
    (_block("10.0.0.0/16", "10.0.0.0/24", "10.1.0.0/24"),
     "spec.ingress[0].from[0].ipBlock.except[1]", "strict subset of cidr 10.0.0.0/16"),
    (_block("10.0.0.0/16", "10.0.0.0/8"), "spec.ingress[0].from[0].ipBlock.except[0]",
     "strict subset"),
    (_block("10.0.0.0/16", "fd00::/64"), "spec.ingress[0].from[0].ipBlock.except[0]",
     "strict subset"),
    (_block("10.0.0.0/16", "10.0.0.x/24"), "spec.ingress[0].from[0].ipBlock.except[0]",
     "not a CIDR"),
    (_rule(peer={}), "spec.ingress[0].from[0]", "must specify a peer"),
    (_rule(peer={"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}),
     "spec.ingress[0].from[0]", "both ipBlock and another peer"),
    (_rule(port={"port": "http", "endPort": 90}), "spec.ingress[0].ports[0].endPort",
     "non-numeric"),
    (_rule(port={"endPort": 90}), "spec.ingress[0].ports[0].endPort", "not specified"),
    (_rule(port={"port": 90, "endPort": 80}), "spec.ingress[0].ports[0].endPort", ">= port"),
    (_rule(port={"port": 80, "endPort": 70000}), "spec.ingress[0].ports[0].endPort",
     "between 1 and 65535"),
    (_rule(port={"port": 0}), "spec.ingress[0].ports[0].port", "between 1 and 65535"),
    (_rule(port={"port": 65536}), "spec.ingress[0].ports[0].port", "between 1 and 65535"),
    (_rule(port={"port": "80"}), "spec.ingress[0].ports[0].port", "at least one letter"),
    (_rule(port={"port": "Http"}), "spec.ingress[0].ports[0].port", "lowercase"),
    (_rule(port={"port": True}), "spec.ingress[0].ports[0].port", "port number or a port name"),
    (_rule(port={"port": 80.5}), "spec.ingress[0].ports[0].port", "port number or a port name"),
    (_policy({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Is"}]}}),
     "spec.podSelector.matchExpressions[0].operator", "unknown operator"),
    (_policy({"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}),
     "spec.podSelector.matchExpressions[0].values", "non-empty when operator is In"),
    (_policy({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Exists",
                                                    "values": ["x"]}]}}),
     "spec.podSelector.matchExpressions[0].values", "empty when operator is Exists"),
    (_policy({"podSelector": {"matchLabels": {"app": 3}}}), "spec.podSelector.matchLabels.app",
     "must be a string"),
    (_rule(peer={"namespaceSelector": {"matchExpressions": [{"operator": "Exists"}]}}),
     "spec.ingress[0].from[0].namespaceSelector.matchExpressions[0].key", "non-empty string"),
    (_policy({"policyTypes": ["Ingress", "Both"]}), "spec.policyTypes[1]", "Ingress or Egress"),
    (_policy({"policyTypes": ["Ingress", "Egress", "Ingress"]}), "spec.policyTypes",
     "more than two"),
    (_policy({"ingress": {"from": []}}), "spec.ingress", "must be a list"),
    (_policy({"egress": [{"to": "everyone"}]}), "spec.egress[0].to", "must be a list"),
    (_policy({"egress": [{"ports": [80]}]}), "spec.egress[0].ports[0]", "must be an object"),
    ({"metadata": {"name": "p"}}, "metadata.namespace", "non-empty string"),
    ({"spec": {}}, "metadata.name", "non-empty string"),
])
def test_malformed_policies_are_refused_by_path(obj: dict[str, Any], field: str,
                                                why: str) -> None:
    with pytest.raises(PolicyError) as info:
        policy_from_k8s(obj)
    assert info.value.field == field
    assert why in info.value.reason
    assert str(info.value).startswith("NetworkPolicy ns/p: " if "metadata" in obj and
                                      "namespace" in obj["metadata"] else "NetworkPolicy: ")
    assert isinstance(info.value, ValueError)


def _pod(**parts: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "x", "labels": {"app": "web"}}, **parts}


def test_pods() -> None:
    got = pod_from_k8s(_pod(
        spec={"nodeName": "n1", "containers": [
            {"ports": [{"name": "http", "containerPort": 8080}, {"containerPort": 9}]},
            {"ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"}]}],
            "initContainers": [
                {"restartPolicy": "Always", "ports": [{"name": "proxy", "containerPort": 15001}]},
                {"ports": [{"name": "setup", "containerPort": 1}]}]},
        status={"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}]}))
    assert got.key == ("ns", "x") and dict(got.labels) == {"app": "web"} and got.node == "n1"
    assert got.ips == (ipaddress.ip_address("10.0.0.1"), ipaddress.ip_address("fd00::1"))
    assert got.ports == (ContainerPort("http", 8080), ContainerPort("dns", 53, "UDP"),
                         ContainerPort("proxy", 15001))
    assert not got.host_network
    assert pod_from_k8s(_pod(status={"podIP": "10.0.0.1"})).ips == \
        (ipaddress.ip_address("10.0.0.1"),)
    for phase in ("Succeeded", "Failed"):
        done = pod_from_k8s(_pod(status={"podIP": "10.0.0.1", "phase": phase}))
        assert done.ips == () and done.terminated
    assert not pod_from_k8s(_pod(status={"podIP": "10.0.0.1", "phase": "Running"})).terminated
    assert pod_from_k8s(_pod(spec={"hostNetwork": True})).host_network
    # the API server reads IPv4 octets with leading zeros as decimal (Go's old parser): so here
    assert pod_from_k8s(_pod(status={"podIP": "010.001.0.7"})).ips == \
        (ipaddress.ip_address("10.1.0.7"),)
    assert pod_from_k8s(_pod()).ips == ()


@pytest.mark.parametrize(("obj", "field"), [
    (_pod(status={"podIPs": [{"ip": "10.0.0.256"}]}), "status.podIPs[0].ip"),
    (_pod(status={"podIP": "x"}), "status.podIP"),
    (_pod(spec={"containers": [{"ports": [{"name": "http", "containerPort": 0}]}]}),
     "spec.containers[0].ports[0].containerPort"),
    (_pod(spec={"containers": [{"ports": [{"name": "http", "containerPort": 80,
                                           "protocol": "ICMP"}]}]}),
     "spec.containers[0].ports[0].protocol"),
    (_pod(spec={"containers": [{"ports": [{"name": "no_underscores", "containerPort": 80}]}]}),
     "spec.containers[0].ports[0].name"),
    (_pod(metadata={"namespace": "ns", "name": "x", "labels": ["app"]}), "metadata.labels"),
])
def test_malformed_pods_are_refused_by_path(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(PolicyError) as info:
        pod_from_k8s(obj)
    assert info.value.field == field
    assert str(info.value).startswith("Pod ns/x: ")


def test_namespaces_carry_their_name_label() -> None:
    got = namespace_from_k8s({"metadata": {"name": "web", "labels": {
        "team": "x", "kubernetes.io/metadata.name": "forged"}}})
    assert dict(got.labels) == {"kubernetes.io/metadata.name": "web", "team": "x"}
    assert dict(namespace_from_k8s({"metadata": {"name": "a"}}).labels) == \
        {"kubernetes.io/metadata.name": "a"}
    with pytest.raises(PolicyError, match=r"metadata\.name"):
        namespace_from_k8s({"metadata": {}})

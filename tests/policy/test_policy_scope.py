"""Which pods the compiler covers, what it exempts, and how it merges rules.

Test plan:
- the node's addresses travel with each of its pods (both directions are the renderer's);
- a host-network pod is neither compiled nor a peer; a Succeeded pod's address is nobody's; a
  pod without an address yet still gets its rules (an ADD needs them first);
- `node=` compiles only that node's pods, `only=` only the pods it names, with peers from the
  whole cluster either way;
- two policies allowing the same ports merge into one rule naming both; equal peers merge their
  ports; a rule whose traffic another allows entirely disappears into it (its policy named
  there); an allow-all rule swallows the rest;
- duplicate pods, namespaces or policies are refused, naming the duplicate;
- a kept index checks the policies again (selection, warnings, duplicates) when the list given
  is not the same objects; a pod's compile reads only its namespace's policies.
"""

from __future__ import annotations

import ipaddress

import pytest

from policy import (
    Namespace,
    NetworkPolicy,
    Pod,
    PolicyError,
    PortRange,
    Rule,
    compile_policies,
    pod_from_k8s,
    policy_from_k8s,
)
from policy.cluster import Cluster
from policy.compiler import compile_cluster
from tests.policy.build import EVERYWHERE, compile_, key, nets, plain, pod, policy, tcp

FROM_WEB = {"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}


def test_node_addresses_travel_with_the_nodes_pods() -> None:
    n1 = [ipaddress.ip_address("fd00:ff::1"), ipaddress.ip_address("172.16.0.1")]
    got = compile_([pod("a", "x", "10.0.0.1", node="n1"), pod("a", "y", "10.0.0.2", node="n2")],
                   [policy("a", "p")], node_addresses={"n1": n1})
    assert got.pods[key("x")].node_addresses == (n1[1], n1[0])  # IPv4 first
    assert got.pods[key("y")].node_addresses == ()


def test_host_network_pods_are_outside_policy() -> None:
    got = compile_([pod("a", "host", "192.168.16.1", {"app": "web"}, hostNetwork=True),
                    pod("a", "db", "10.0.0.2")], [policy("a", "p", ingress=[FROM_WEB])])
    assert key("host") not in got.pods
    assert plain(got.pods[key("db")].ingress) == (True, ())


def test_a_terminated_pods_address_is_nobodys() -> None:
    done = pod("a", "done", "10.0.0.1", {"app": "web"})
    done["status"]["phase"] = "Succeeded"
    got = compile_([done, pod("a", "db", "10.0.0.2")], [policy("a", "p", ingress=[FROM_WEB])])
    assert plain(got.pods[key("db")].ingress) == (True, ())
    assert got.pods[key("done")].ingress.isolated  # still selected; it has no address to use


def test_a_pod_without_an_address_gets_its_rules() -> None:
    got = compile_([pod("a", "new", None), pod("a", "web", "10.0.0.1", {"app": "web"})],
                   [policy("a", "p", ingress=[FROM_WEB])])
    assert got.pods[key("new")].ingress.rules == (Rule(nets("10.0.0.1/32"), None, ("a/p",)),)


def test_one_nodes_pods_with_peers_from_everywhere() -> None:
    pods = [pod("a", "x", "10.0.0.1", node="n1"), pod("a", "web", "10.0.0.2", {"app": "web"},
                                                      node="n2")]
    everything = compile_(pods, [policy("a", "p", ingress=[FROM_WEB])])
    mine = compile_(pods, [policy("a", "p", ingress=[FROM_WEB])], node="n1")
    assert list(mine.pods) == [key("x")]
    assert mine.pods[key("x")] == everything.pods[key("x")]
    assert mine.pods[key("x")].ingress.rules[0].peers == nets("10.0.0.2/32")


def test_only_the_named_pods_with_peers_from_everywhere() -> None:
    pods = [pod("a", "x", "10.0.0.1", node="n1"), pod("a", "y", "10.0.0.3", node="n1"),
            pod("a", "web", "10.0.0.2", {"app": "web"}, node="n2")]
    everything = compile_(pods, [policy("a", "p", ingress=[FROM_WEB])])
    one = compile_(pods, [policy("a", "p", ingress=[FROM_WEB])], only={key("y")})
    assert one.pods == {key("y"): everything.pods[key("y")]}
    assert compile_(pods, [policy("a", "p")], node="n2", only={key("y")}).pods == {}


def test_equal_ports_merge_and_name_both_policies() -> None:
    got = compile_([pod("a", "x", "10.0.0.1"), pod("a", "w1", "10.0.0.2", {"app": "web"}),
                    pod("a", "w2", "10.0.0.3", {"app": "api"})],
                   [policy("a", "p", ingress=[{**FROM_WEB, "ports": [{"port": 80}]}]),
                    policy("a", "q", ingress=[{"from": [{"podSelector": {"matchLabels": {
                        "app": "api"}}}], "ports": [{"port": 80}]}])])
    assert got.pods[key("x")].ingress.rules == (
        Rule(nets("10.0.0.2/31"), (tcp(80),), ("a/p", "a/q")),)


def test_equal_peers_merge_their_ports() -> None:
    got = compile_([pod("a", "x", "10.0.0.1"), pod("a", "w", "10.0.0.2", {"app": "web"})],
                   [policy("a", "p", ingress=[{**FROM_WEB, "ports": [{"port": 80}]},
                                              {**FROM_WEB, "ports": [{"protocol": "UDP"}]}])])
    assert got.pods[key("x")].ingress.rules == (
        Rule(nets("10.0.0.2/32"), (tcp(80), PortRange("UDP", 0, 65535)), ("a/p",)),)


def test_a_rule_inside_another_disappears_into_it() -> None:
    got = compile_([pod("a", "x", "10.0.0.1"), pod("a", "w", "10.0.0.2", {"app": "web"})],
                   [policy("a", "p", ingress=[{**FROM_WEB, "ports": [{"port": 80}]}]),
                    policy("a", "q", ingress=[{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}],
                                               "ports": [{"port": 1, "endPort": 1000}]}])])
    assert got.pods[key("x")].ingress.rules == (
        Rule(nets("10.0.0.0/8"), (tcp(1, 1000),), ("a/p", "a/q")),)


def test_an_allow_all_swallows_the_rest() -> None:
    got = compile_([pod("a", "x", "10.0.0.1"), pod("a", "w", "10.0.0.2", {"app": "web"})],
                   [policy("a", "p", ingress=[{**FROM_WEB, "ports": [{"port": 80}]}]),
                    policy("a", "all", ingress=[{}])])
    assert got.pods[key("x")].ingress.rules == (Rule(EVERYWHERE, None, ("a/all", "a/p")),)


def test_duplicates_are_refused() -> None:
    with pytest.raises(PolicyError, match="a/x"):
        compile_policies([Pod("a", "x"), Pod("a", "x")], [], [], sctp=True)
    with pytest.raises(PolicyError, match="two Namespaces"):
        compile_policies([], [Namespace("a"), Namespace("a")], [], sctp=True)
    with pytest.raises(PolicyError, match="a/p"):
        compile_policies([], [], [NetworkPolicy("a", "p"), NetworkPolicy("a", "p")], sctp=True)


def test_a_kept_index_checks_the_policies_again_when_they_change() -> None:
    # the compiler memoizes the checked policies (order, names, warnings) in the index for the
    # same objects; a new list is checked anew
    index = Cluster([pod_from_k8s(pod("a", "x", "10.0.0.1", {"app": "x"})),
                     pod_from_k8s(pod("b", "y", "10.0.0.2", {"app": "x"}))], [])
    deny_a = policy_from_k8s(policy("a", "deny"))
    first = compile_cluster(index, [deny_a], sctp=True, only={key("x"), key("y", "b")})
    assert first.pods[key("x")].ingress.isolated
    assert not first.pods[key("y", "b")].ingress.isolated  # a's policy selects in a only
    again = compile_cluster(index, [deny_a], sctp=True, only={key("y", "b")})
    assert not again.pods[key("y", "b")].ingress.isolated
    deny_b = policy_from_k8s(policy("b", "deny"))
    both = compile_cluster(index, [deny_a, deny_b], sctp=True, only={key("y", "b")})
    assert both.pods[key("y", "b")].ingress.isolated
    sctp = policy_from_k8s(policy("a", "s", ingress=[{"ports": [{"protocol": "SCTP",
                                                                  "port": 9}]}]))
    assert compile_cluster(index, [sctp], sctp=False, only={key("y", "b")}).warnings
    assert not compile_cluster(index, [sctp], sctp=True, only={key("y", "b")}).warnings
    with pytest.raises(PolicyError, match="a/deny"):
        compile_cluster(index, [deny_a, deny_b, policy_from_k8s(policy("a", "deny"))],
                        sctp=True, only={key("y", "b")})

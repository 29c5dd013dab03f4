"""The compiler, feature by feature, on hand-written clusters (the property tests cover mixtures).

Test plan:
- selection: an empty podSelector selects every pod of the policy's namespace and no other; a pod
  selected by no policy of a direction is not isolated for it; a policy with no rules isolates
  (default deny); policyTypes defaulting and explicit policyTypes; rules of a direction the
  policy does not affect are ignored, with a warning;
- peers: from/to missing or [] = every address; podSelector alone = the policy's namespace;
  namespaceSelector alone = every pod of the matching namespaces; both = AND; matchExpressions;
  `kubernetes.io/metadata.name`; ipBlock with excepts (IPv4 and IPv6), matching pod addresses too;
- ports: numeric, endPort ranges, protocol without port, TCP/UDP/SCTP; named ports resolved
  against the destination pod (ingress: each selected pod; egress: each peer pod, splitting the
  rule); a named port nothing resolves is no rule, never every port;
- SCTP without the renderer's support: the entry matches nothing and is warned about; the other
  entries of its rule stand; never an allow of every protocol;
- exemptions and scope: node addresses carried per pod; host-network pods neither compiled nor
  peers; a terminated pod's address is nobody's; a pod without addresses still gets its rules;
  `node=` compiles that node's pods only;
- canonical merging: equal ports or equal peers merge, with the policies of both; a rule inside
  another disappears into it; duplicate names are refused.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from policy import Rule
from tests.policy.build import EVERYWHERE, compile_, key, nets, plain, pod, policy

# --- selection and isolation -----------------------------------------------------------------

def test_an_empty_pod_selector_selects_every_pod_of_its_namespace_only() -> None:
    got = compile_([pod("a", "x", "10.0.0.1"), pod("a", "y", "10.0.0.2"),
                    pod("b", "z", "10.0.0.3")], [policy("a", "deny")])
    assert plain(got.pods[key("x")].ingress) == plain(got.pods[key("y")].ingress) \
        == (True, ())
    assert plain(got.pods[key("z", "b")].ingress) == (False, ())
    assert not got.pods[key("x")].egress.isolated  # no egress rules: Ingress only


@pytest.mark.parametrize(("spec", "ingress", "egress"), [
    ({}, True, False),
    ({"egress": []}, True, False),  # an empty egress list is no egress section (len == 0)
    ({"egress": [{}]}, True, True),
    ({"policyTypes": []}, True, False),  # empty: defaulted like missing
    ({"policyTypes": ["Egress"]}, False, True),
    ({"policyTypes": ["Ingress", "Egress"]}, True, True),
])
def test_policy_types_default_as_the_api_server_does(spec: dict[str, Any], ingress: bool,
                                                     egress: bool) -> None:
    got = compile_([pod("a", "x", "10.0.0.1")], [policy("a", "p", **spec)]).pods[key("x")]
    assert (got.ingress.isolated, got.egress.isolated) == (ingress, egress)
    assert got.ingress.rules == ()
    assert got.egress.rules == ((Rule(EVERYWHERE, None, ("a/p",)),) if spec.get("egress") else ())


def test_rules_of_a_direction_the_policy_does_not_affect_are_ignored_and_warned() -> None:
    got = compile_([pod("a", "x", "10.0.0.1")],
                   [policy("a", "p", policyTypes=["Egress"], ingress=[{}], egress=[{}])])
    assert plain(got.pods[key("x")].ingress) == (False, ())
    assert got.pods[key("x")].egress.rules == (Rule(EVERYWHERE, None, ("a/p",)),)
    assert got.warnings == ("NetworkPolicy a/p: spec.ingress is ignored: policyTypes has no "
                            "Ingress",)


# --- peers ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", [{}, {"from": []}, {"from": None}])
def test_missing_or_empty_from_is_every_source(rule: dict[str, Any]) -> None:
    got = compile_([pod("a", "x", "10.0.0.1")], [policy("a", "p", ingress=[rule])])
    assert got.pods[key("x")].ingress.rules == (Rule(EVERYWHERE, None, ("a/p",)),)


CLUSTER = [pod("a", "web", "10.0.0.1", {"app": "web"}),
           pod("a", "db", "10.0.0.2", {"app": "db"}),
           pod("b", "web", "10.0.1.1", {"app": "web"}),
           pod("b", "db", ["10.0.1.2", "fd00::12"], {"app": "db"}),
           pod("c", "web", "10.0.2.1", {"app": "web"})]
NAMESPACES = {"a": {"team": "x"}, "b": {"team": "x"}, "c": {"team": "y"}}
WEB = {"matchLabels": {"app": "web"}}


def _peers_of(peer: dict[str, Any]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    got = compile_(CLUSTER, [policy("a", "p", podSelector={"matchLabels": {"app": "db"}},
                                    ingress=[{"from": [peer]}])], NAMESPACES)
    rules = got.pods[key("db")].ingress.rules
    assert len(rules) <= 1, rules
    return rules[0].peers if rules else ()


def test_a_pod_selector_alone_means_the_policys_namespace() -> None:
    assert _peers_of({"podSelector": WEB}) == nets("10.0.0.1/32")


def test_a_namespace_selector_alone_means_every_pod_of_those_namespaces() -> None:
    assert _peers_of({"namespaceSelector": {"matchLabels": {"team": "x"}}}) == \
        nets("10.0.0.1/32", "10.0.0.2/32", "10.0.1.1/32", "10.0.1.2/32", "fd00::12/128")


def test_both_selectors_together_are_anded() -> None:
    assert _peers_of({"namespaceSelector": {"matchLabels": {"team": "x"}},
                      "podSelector": WEB}) == nets("10.0.0.1/32", "10.0.1.1/32")


def test_two_peers_are_ored() -> None:
    assert _peers_of({"namespaceSelector": {"matchLabels": {"team": "y"}}}) == \
        nets("10.0.2.1/32")
    got = compile_(CLUSTER, [policy("a", "p", podSelector={"matchLabels": {"app": "db"}},
                                    ingress=[{"from": [
                                        {"namespaceSelector": {"matchLabels": {"team": "y"}}},
                                        {"podSelector": WEB}]}])], NAMESPACES)
    assert got.pods[key("db")].ingress.rules[0].peers == nets("10.0.0.1/32", "10.0.2.1/32")


def test_the_namespace_name_label_is_implied() -> None:
    by_name = {"matchLabels": {"kubernetes.io/metadata.name": "c"}}
    assert _peers_of({"namespaceSelector": by_name}) == nets("10.0.2.1/32")
    # a namespace with pods but no Namespace object has that label too
    got = compile_(CLUSTER, [policy("a", "p", ingress=[{"from": [{"namespaceSelector":
                                                                     by_name}]}])])
    assert got.pods[key("db")].ingress.rules[0].peers == nets("10.0.2.1/32")


def _addresses(peers: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]) -> set[str]:
    return {str(a) for net in peers for a in net}


@pytest.mark.parametrize(("expression", "expected"), [
    ({"key": "app", "operator": "In", "values": ["web", "x"]},
     {"10.0.0.1", "10.0.1.1", "10.0.2.1"}),
    ({"key": "app", "operator": "NotIn", "values": ["db"]},
     {"10.0.0.1", "10.0.1.1", "10.0.2.1"}),
    ({"key": "app", "operator": "NotIn", "values": ["web"]},
     {"10.0.0.2", "10.0.1.2", "fd00::12"}),
    ({"key": "app", "operator": "Exists"},
     {"10.0.0.1", "10.0.0.2", "10.0.1.1", "10.0.1.2", "fd00::12", "10.0.2.1"}),
    ({"key": "tier", "operator": "DoesNotExist"},
     {"10.0.0.1", "10.0.0.2", "10.0.1.1", "10.0.1.2", "fd00::12", "10.0.2.1"}),
    ({"key": "app", "operator": "DoesNotExist"}, set()),
])
def test_match_expressions(expression: dict[str, Any], expected: set[str]) -> None:
    got = compile_(CLUSTER, [policy("a", "p", podSelector={"matchLabels": {"app": "db"}},
                                    ingress=[{"from": [{"namespaceSelector": {}, "podSelector": {
                                        "matchExpressions": [expression]}}]}])], NAMESPACES)
    rules = got.pods[key("db")].ingress.rules
    assert _addresses(rules[0].peers if rules else ()) == expected


def test_match_labels_and_expressions_are_anded() -> None:
    selector = {"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                      "values": ["a"]}]}
    assert _addresses(_peers_of({"namespaceSelector": selector})) == set()  # ns has no app
    assert _addresses(_peers_of({"namespaceSelector": {"matchExpressions": selector[
        "matchExpressions"]}, "podSelector": WEB})) == {"10.0.1.1", "10.0.2.1"}


def test_an_ip_block_takes_its_excepts_out_in_both_families() -> None:
    assert _peers_of({"ipBlock": {"cidr": "10.0.0.0/24", "except": ["10.0.0.0/25",
                                                                   "10.0.0.128/26"]}}) == \
        nets("10.0.0.192/26")
    assert _peers_of({"ipBlock": {"cidr": "fd00::/64", "except": ["fd00::/65"]}}) == \
        nets("fd00::8000:0:0:0/65")


def test_an_ip_block_matches_pod_addresses_as_any_other() -> None:
    # the upstream e2e tests put pod addresses in ipBlock; the dataplane sees only addresses
    assert _peers_of({"ipBlock": {"cidr": "10.0.1.0/24", "except": ["10.0.1.2/32"]}}) == \
        nets("10.0.1.0/31", "10.0.1.3/32", "10.0.1.4/30", "10.0.1.8/29", "10.0.1.16/28",
             "10.0.1.32/27", "10.0.1.64/26", "10.0.1.128/25")


def test_a_cidr_with_host_bits_means_its_network() -> None:
    assert _peers_of({"ipBlock": {"cidr": "10.9.9.9/16"}}) == nets("10.9.0.0/16")


def test_a_selector_that_matches_nothing_gives_no_rule() -> None:
    got = compile_(CLUSTER, [policy("a", "p", ingress=[{"from": [
        {"podSelector": {"matchLabels": {"app": "nothing"}}}]}])])
    assert plain(got.pods[key("db")].ingress) == (True, ())

"""Ports: numbers, ranges, protocols, named ports per destination pod, and SCTP.

Test plan:
- a number is that port, port..endPort the range, a protocol alone every port of it; TCP is the
  default; entries of one rule merge per protocol (adjacent ranges into one);
- ingress named ports resolve against each selected pod: two pods, two numbers; a pod without
  the name (or with it under another protocol) gets no rule from that entry;
- egress named ports resolve against each destination pod: the rule splits by peer, and an
  address no pod holds (ipBlock) has no named port; numeric entries of the same rule stay whole;
- a rule whose every entry resolves to nothing allows nothing (not every port);
- without the renderer's SCTP: the SCTP entry matches nothing with a warning naming it, a rule of
  SCTP entries only is no rule at all, other entries stand; with it, SCTP ports are kept;
- the upstream e2e case "should not mistakenly treat 'protocol: SCTP' as 'protocol: TCP'".
"""

from __future__ import annotations

from typing import Any

import pytest

from policy import PortRange, Rule
from tests.policy.build import EVERYWHERE, compile_, key, nets, plain, pod, policy, tcp

HTTP_8080 = [{"name": "http", "containerPort": 8080}]
HTTP_9090 = [{"name": "http", "containerPort": 9090}]


def _ingress_ports(*entries: dict[str, Any], sctp: bool = True) -> object:
    got = compile_([pod("a", "x", "10.0.0.1", ports=HTTP_8080)],
                   [policy("a", "p", ingress=[{"ports": list(entries)}])], sctp=sctp)
    rules = got.pods[key("x")].ingress.rules
    return rules[0].ports if rules else "no rule"


@pytest.mark.parametrize(("entries", "expected"), [
    ([{"port": 80}], (tcp(80),)),
    ([{"protocol": "UDP", "port": 53}], (PortRange("UDP", 53, 53),)),
    ([{"port": 8000, "endPort": 8080}], (tcp(8000, 8080),)),
    ([{"protocol": "UDP"}], (PortRange("UDP", 0, 65535),)),
    ([{}], (PortRange("TCP", 0, 65535),)),
    ([{"port": 80}, {"port": 81}, {"port": 82, "endPort": 90}, {"port": 85}], (tcp(80, 90),)),
    ([{"port": 80}, {"protocol": "UDP", "port": 80}], (tcp(80), PortRange("UDP", 80, 80))),
    ([{"protocol": "SCTP", "port": 9}], (PortRange("SCTP", 9, 9),)),
    ([{"port": "http"}, {"port": 80}], (tcp(80), tcp(8080))),
    ([{"protocol": "UDP", "port": "http"}], "no rule"),  # the pod's http is TCP
    ([{"port": "metrics"}], "no rule"),  # never every port
])
def test_port_entries(entries: list[dict[str, Any]], expected: object) -> None:
    assert _ingress_ports(*entries) == expected


def test_ingress_named_ports_resolve_against_each_selected_pod() -> None:
    got = compile_([pod("a", "x", "10.0.0.1", ports=HTTP_8080),
                    pod("a", "y", "10.0.0.2", ports=HTTP_9090), pod("a", "z", "10.0.0.3")],
                   [policy("a", "p", ingress=[{"ports": [{"port": "http"}]}])])
    assert got.pods[key("x")].ingress.rules == (Rule(EVERYWHERE, (tcp(8080),), ("a/p",)),)
    assert got.pods[key("y")].ingress.rules == (Rule(EVERYWHERE, (tcp(9090),), ("a/p",)),)
    assert plain(got.pods[key("z")].ingress) == (True, ())


def test_egress_named_ports_resolve_against_each_destination_pod() -> None:
    got = compile_([pod("a", "client", "10.0.0.9", {"app": "client"}),
                    pod("a", "x", ["10.0.0.1", "fd00::1"], {"app": "s"}, ports=HTTP_8080),
                    pod("a", "y", "10.0.0.2", {"app": "s"}, ports=HTTP_9090),
                    pod("a", "z", "10.0.0.3", {"app": "s"}),
                    pod("b", "w", "10.0.1.1", ports=HTTP_8080)],
                   [policy("a", "p", podSelector={"matchLabels": {"app": "client"}},
                           egress=[{"to": [{"podSelector": {"matchLabels": {"app": "s"}}},
                                           {"ipBlock": {"cidr": "192.168.0.0/16"}}],
                                    "ports": [{"port": "http"}, {"port": 443}]}])])
    assert got.pods[key("client")].egress.rules == (
        # 443 to every peer (x, y, z and the block); http per peer pod that defines it
        Rule(nets("10.0.0.1/32", "10.0.0.2/31", "192.168.0.0/16", "fd00::1/128"), (tcp(443),),
             ("a/p",)),
        Rule(nets("10.0.0.1/32", "fd00::1/128"), (tcp(8080),), ("a/p",)),
        Rule(nets("10.0.0.2/32"), (tcp(9090),), ("a/p",)),
    )


def test_egress_named_ports_reach_pods_inside_an_ip_block() -> None:
    got = compile_([pod("a", "client", "10.0.0.9"), pod("b", "x", "10.0.1.1", ports=HTTP_8080)],
                   [policy("a", "p", egress=[{"to": [{"ipBlock": {"cidr": "10.0.0.0/16"}}],
                                              "ports": [{"port": "http"}]}])])
    assert got.pods[key("client")].egress.rules == (
        Rule(nets("10.0.1.1/32"), (tcp(8080),), ("a/p",)),)


def test_without_sctp_an_sctp_entry_matches_nothing_and_says_so() -> None:
    assert _ingress_ports({"protocol": "SCTP", "port": 9}, sctp=False) == "no rule"
    assert _ingress_ports({"protocol": "SCTP"}, sctp=False) == "no rule"
    assert _ingress_ports({"protocol": "SCTP"}, {"port": 80}, sctp=False) == (tcp(80),)
    got = compile_([pod("a", "x", "10.0.0.1")],
                   [policy("a", "p", ingress=[{"ports": [{"port": 80},
                                                         {"protocol": "SCTP", "port": 9}]}])],
                   sctp=False)
    assert got.warnings == ("NetworkPolicy a/p: spec.ingress[0].ports[1]: SCTP cannot be "
                            "expressed by this dataplane; the entry matches nothing",)


def test_sctp_is_never_taken_for_tcp() -> None:
    # upstream e2e: a policy allowing SCTP/80 only must not let TCP/80 through, SCTP or not
    for sctp in (True, False):
        got = compile_([pod("a", "server", "10.0.0.1", {"app": "s"})],
                       [policy("a", "p", podSelector={"matchLabels": {"app": "s"}},
                               ingress=[{"ports": [{"protocol": "SCTP", "port": 80}]}])],
                       sctp=sctp)
        rules = got.pods[key("server")].ingress
        assert rules.isolated
        assert all(r.ports is not None and all(p.protocol == "SCTP" for p in r.ports)
                   for r in rules.rules)
        assert bool(rules.rules) == sctp

"""The pure rendering of a pod's compiled policy into acl-plugin rules (agent/dataplane/vpp/
acl_render.py): no VPP.

Plan:
- a pod isolated in neither direction gets no ACL; isolated in one, both (the open one a
  permit+reflect of everything, so that answers to the other direction's connections pass);
- only this node's addresses are exempt: another node's IP meets the rules (an ipBlock lets it
  in);
- the order in each ACL: node addresses, (ingress) the pod's own addresses, ICMPv6 ND,
  (egress) the Service CIDRs, the compiled rules, the trailing denies;
- compiled rules: peers x port ranges, the destination's ports, permit+reflect; ports None is
  every protocol; IPv4 and IPv6 peers; SCTP: a whole-protocol entry is protocol 132, a range of
  it matches nothing (the plugin reads no SCTP ports);
- the rules' fields are what vpp-papi takes, and what VPP gives back reads as the same rule;
- tags: `vswitch-cni/<ns>/<pod>/in|out`, shortened with a hash beyond 63 characters, parsed back.
"""

from __future__ import annotations

import ipaddress
from collections import namedtuple

from agent.dataplane.vpp import acl_render as ar
from policy import DirectionRules, PodKey, PodPolicy, PortRange, Rule
from tests.policy.build import compile_, nets, pod, policy

KEY = PodKey("web", "api-0")
OPEN = DirectionRules(False)
NODE = (ipaddress.ip_address("172.30.1.2"), ipaddress.ip_address("192.168.16.1"))
SERVICES = nets("10.96.0.0/12", "fd00:96::/108")
OWN = (ipaddress.ip_address("10.1.1.5"), ipaddress.ip_address("fd00:1:1::5"))
V4, V6 = ar.EVERYWHERE


def pp(ingress: DirectionRules = OPEN, egress: DirectionRules = OPEN) -> PodPolicy:
    return PodPolicy(KEY, (), ingress, egress)


def render(p: PodPolicy) -> ar.PodRules:
    rules = ar.render(p, OWN, SERVICES, NODE)
    assert rules is not None
    return rules


def reasons(rules: tuple[ar.AclRule, ...]) -> list[str]:
    return [r.reason for r in rules]


def test_a_pod_no_policy_isolates_gets_no_acl() -> None:
    assert ar.render(pp(), OWN, SERVICES, NODE) is None


def test_default_deny_ingress_keeps_egress_open_and_stateful() -> None:
    rules = render(pp(ingress=DirectionRules(True)))
    assert reasons(rules.output) == ["node", "node", "self", "self", "icmp6-nd",
                                     "default-deny", "default-deny"]
    assert reasons(rules.input) == ["node", "node", "icmp6-nd", *["open"] * 6]
    # A TCP SYN and all but TCP open sessions; the rest of TCP passes without one.
    assert [(r.action, r.src, r.proto, r.tcp_flags) for r in rules.input if r.reason == "open"] \
        == [(ar.PERMIT_REFLECT, V4, 6, (0x12, 0x02)), (ar.PERMIT, V4, 6, (0, 0)),
            (ar.PERMIT_REFLECT, V4, 0, (0, 0)), (ar.PERMIT_REFLECT, V6, 6, (0x12, 0x02)),
            (ar.PERMIT, V6, 6, (0, 0)), (ar.PERMIT_REFLECT, V6, 0, (0, 0))]
    assert [(r.src, r.dst) for r in rules.output if r.reason == "default-deny"] == \
        [(V4, V4), (V6, V6)]
    node = [r for r in rules.output if r.reason == "node"]
    assert [(r.action, r.src, r.dst) for r in node] == \
        [(ar.PERMIT, nets("172.30.1.2/32")[0], V4), (ar.PERMIT, nets("192.168.16.1/32")[0], V4)]
    own = [r.src for r in rules.output if r.reason == "self"]
    assert own == list(nets("10.1.1.5/32", "fd00:1:1::5/128"))


def test_egress_rules_allow_services_and_the_node_before_the_rules() -> None:
    rule = Rule(nets("10.2.0.0/16", "fd00:2::/64"), (PortRange("TCP", 80, 80),
                                                     PortRange("UDP", 53, 54)), ("web/p",))
    rules = render(pp(egress=DirectionRules(True, (rule,))))
    assert reasons(rules.input) == ["node", "node", "icmp6-nd", "service", "service",
                                    *["policy"] * 4, "default-deny", "default-deny"]
    service = [r for r in rules.input if r.reason == "service"]
    assert [(r.action, r.src, r.dst, r.proto) for r in service] == \
        [(ar.PERMIT_REFLECT, V4, SERVICES[0], 0), (ar.PERMIT_REFLECT, V6, SERVICES[1], 0)]
    got = [(r.src, r.dst, r.proto, r.sport, r.dport, r.policies)
           for r in rules.input if r.reason == "policy"]
    assert got == [
        (V4, nets("10.2.0.0/16")[0], 6, (0, 65535), (80, 80), ("web/p",)),
        (V4, nets("10.2.0.0/16")[0], 17, (0, 65535), (53, 54), ("web/p",)),
        (V6, nets("fd00:2::/64")[0], 6, (0, 65535), (80, 80), ("web/p",)),
        (V6, nets("fd00:2::/64")[0], 17, (0, 65535), (53, 54), ("web/p",)),
    ]
    assert all(r.action == ar.PERMIT_REFLECT for r in rules.input if r.reason == "policy")
    # Ingress is open, yet an ACL: the answers to the pod's connections need no session there,
    # but connections to the pod must leave one for its answers through the input ACL.
    assert reasons(rules.output)[-6:] == ["open"] * 6


def test_ingress_peers_are_sources_and_ports_the_pods_own() -> None:
    rule = Rule(nets("10.3.0.7/32"), (PortRange("TCP", 8000, 8080),), ("web/a", "web/b"))
    everything = Rule(nets("10.4.0.0/24"), None, ("web/c",))
    rules = render(pp(ingress=DirectionRules(True, (everything, rule))))
    got = [(r.src, r.dst, r.proto, r.dport) for r in rules.output if r.reason == "policy"]
    assert got == [(nets("10.4.0.0/24")[0], V4, 0, (0, 65535)),
                   (nets("10.3.0.7/32")[0], V4, 6, (8000, 8080))]


def test_sctp_whole_protocol_is_expressible_a_range_is_not() -> None:
    rule = Rule(nets("10.5.0.0/24"), (PortRange("SCTP", 0, 65535), PortRange("SCTP", 9, 9),
                                      PortRange("TCP", 9, 9)), ("web/s",))
    rules = render(pp(ingress=DirectionRules(True, (rule,))))
    assert [(r.proto, r.dport) for r in rules.output if r.reason == "policy"] == \
        [(132, (0, 65535)), (6, (9, 9))]


def test_neighbor_discovery_passes_both_ways() -> None:
    rules = render(pp(ingress=DirectionRules(True), egress=DirectionRules(True)))
    for acl in (rules.input, rules.output):
        nd = [r for r in acl if r.reason == "icmp6-nd"]
        assert [(r.action, r.proto, r.sport, r.dport) for r in nd] == \
            [(ar.PERMIT, 58, (133, 137), (0, 255))]


def test_the_compilers_node_addresses_join_the_agents() -> None:
    p = PodPolicy(KEY, (ipaddress.ip_address("192.168.16.1"), ipaddress.ip_address("fd00::1")),
                  DirectionRules(True), OPEN)
    rules = ar.render(p, (), (), NODE[:1])
    assert rules is not None
    assert [r.src for r in rules.output if r.reason == "node"] == \
        list(nets("172.30.1.2/32", "192.168.16.1/32", "fd00::1/128"))


def test_no_other_node_is_exempt() -> None:
    # Only this node's addresses are let in before the rules; another node's IP (a hostNetwork
    # pod there) meets the rules like any peer: refused, unless an ipBlock allows it.
    other = nets("192.168.16.2/32")[0]
    rules = ar.render(pp(ingress=DirectionRules(True), egress=DirectionRules(True)), OWN,
                      SERVICES, NODE)
    assert rules is not None
    permits = [r for r in rules.output if r.action != ar.DENY]
    assert not any(other.subnet_of(r.src) for r in permits  # type: ignore[arg-type]
                   if r.src.version == 4 and r.src.prefixlen), permits
    assert {r.reason for r in permits} == {"node", "self", "icmp6-nd"}
    block = Rule((other,), None, ("a/nodes",))
    allowed = ar.render(pp(ingress=DirectionRules(True, (block,))), OWN, SERVICES, NODE)
    assert allowed is not None
    assert [(r.action, r.src) for r in allowed.output if r.reason == ar.POLICY] == \
        [(ar.PERMIT_REFLECT, other)]


def test_a_compiled_cluster_renders() -> None:
    compiled = compile_(
        [pod("web", "api-0", "10.1.1.5", {"app": "api"}),
         pod("web", "client", "10.1.1.6", {"app": "client"})],
        [policy("web", "api", podSelector={"matchLabels": {"app": "api"}},
                ingress=[{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}],
                          "ports": [{"port": 8080}]}])], sctp=False)
    rules = ar.render(compiled.pods[KEY], OWN, SERVICES, NODE)
    assert rules is not None
    got = [(r.src, r.proto, r.dport, r.policies) for r in rules.output if r.reason == "policy"]
    assert got == [(nets("10.1.1.6/32")[0], 6, (8080, 8080), ("web/api",))]
    assert ar.render(compiled.pods[PodKey("web", "client")], (), SERVICES, NODE) is None


Detail = namedtuple("Detail", "is_permit src_prefix dst_prefix proto srcport_or_icmptype_first "
                    "srcport_or_icmptype_last dstport_or_icmpcode_first dstport_or_icmpcode_last "
                    "tcp_flags_mask tcp_flags_value")


def test_fields_round_trip_through_vpps_details() -> None:
    rule = ar.AclRule(ar.PERMIT_REFLECT, V4, nets("10.2.0.0/16")[0], 6, (0, 65535), (53, 53),
                      (0x12, 0x02), "policy", ("web/p",))
    back = ar.rule_from_vpp(Detail(**rule.fields()))
    assert back.match() == rule.match() and back.reason == ""


def test_tags_name_the_pod_and_fit_vpp() -> None:
    assert ar.tag(KEY, "in") == "vswitch-cni/web/api-0/in"
    assert ar.parse_tag("vswitch-cni/web/api-0/out") == ("vswitch-cni/web/api-0", "out")
    long_a, long_b = PodKey("n" * 63, "p" * 253), PodKey("n" * 63, "p" * 252 + "q")
    tags = {ar.tag(k, d) for k in (long_a, long_b) for d in ("in", "out")}
    assert len(tags) == 4 and all(len(t) <= ar.TAG_MAX for t in tags)
    for t in tags:
        parsed = ar.parse_tag(t)
        assert parsed is not None and t == f"{parsed[0]}/{parsed[1]}"
    assert ar.tag(long_a, "in") == ar.tag(PodKey("n" * 63, "p" * 253), "in")  # recomputable
    for other in ("vswitch-cni/pod-gateway", "vswitch-cni/web/api-0/x", "other/web/a/in"):
        assert ar.parse_tag(other) is None


def test_with_services_in_vpp_a_pod_may_send_to_itself() -> None:
    """ServiceTranslation vpp: a hairpin connection is sent back to the pod by cnat before the
    input ACL; the pod's own addresses pass it whatever its egress rules (tests/vpp/
    test_cnat_real_vpp.py saw it dropped without)."""
    deny = pp(egress=DirectionRules(True))
    rules = ar.render(deny, OWN, SERVICES, NODE, self_egress=True)
    assert rules is not None
    own = [(r.action, r.src, r.dst) for r in rules.input if r.reason == "self"]
    assert own == [(ar.PERMIT, V4, nets("10.1.1.5/32")[0]),
                   (ar.PERMIT, V6, nets("fd00:1:1::5/128")[0])]
    assert reasons(rules.input).index("self") < reasons(rules.input).index("default-deny")
    assert "self" not in reasons(render(deny).input)  # kube-proxy: hairpin passes the node

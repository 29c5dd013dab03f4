"""The renderer's pure parts, without root: the JSON it gives nftables, the transactions' order
and scope, the verdict the conntrack sweep asks, the counters' meaning.

Test plan:
- a pod chain: the node's addresses return first (the pod's own are pairs of policy-self, and
  the chain is the same without them); one nft rule per rule x IP version x
  protocol, ports as sets of numbers and ranges, a protocol's every port as the protocol alone,
  `ports None` as no port match at all (never an empty set); one counter per allowing policy;
  a final counted drop; a non-isolated direction has no chain and no map element;
- the base chain: established first, the no-SYN drops, a pod to itself (policy-self), then
  egress maps before ingress maps;
- a full transaction: flushes the maps before deleting stale chains, adds (never deletes) the
  counters it keeps, deletes stale counters last; touches no object NAT owns;
- a diff transaction: nothing when nothing changed; one pod's changed peers rewrite that pod's
  chain only; an address moved to another pod's chain is deleted then added; stale chains go
  after their elements, stale counters last; a chain whose rules are unknown (read from the
  kernel) is rewritten;
- a per-pod transaction: only that pod's chains and counters, and the map elements of its
  addresses (an address another pod held is taken over); removal of a pod; what is installed
  after it; the ADD of a pod whose chains were made before it (with no address) is only
  elements;
- the verdict: isolation, exemptions (this node's addresses only: another node's is a peer
  like any), peers, ports and protocols, both ends;
- widening: a peer, a wider prefix, a port or a rule more, or isolation lifted cut nothing (no
  sweep); a peer or port fewer, isolation added, other addresses or exemptions fewer may; what
  is swept: nothing when a set grew, the members that left when a set shrank, else the pod's
  own addresses;
- views: the counters' meanings, a pod's view;
- shared rules: each selector a named set per IP version (both, even without members), the
  chain's rules name it (one rule per set) beside the static CIDRs, never a member; a change of
  members is element commands on those sets only; a set is added before the first rule naming
  it (full, diff and per-pod transactions) and deleted after the last one went; removal
  deletes the sets.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from agent.linux.nftelements import element_ops
from agent.linux.nftpolicy import render, transactions
from agent.linux.nftpolicy.render import PodRules
from agent.linux.nftpolicy.transactions import Installed
from agent.linux.nftpolicy.verdict import Flow, allowed, owners, to_sweep, widens
from agent.linux.nftpolicy.views import Count, meanings, pod_view
from policy import DirectionRules, PodKey, PodPolicy, PortRange, Rule
from policy.rules import OPEN, PeerSet, SetRule

A, B = PodKey("t", "a"), PodKey("t", "b")
NODE = (ipaddress.ip_address("192.168.0.1"),)
ADDR_A = (ipaddress.ip_address("10.0.0.5"), ipaddress.ip_address("fd00::5"))
ADDR_B = (ipaddress.ip_address("10.0.0.6"),)
NETS = (ipaddress.ip_network("10.1.0.0/16"), ipaddress.ip_network("10.0.0.7/32"),
        ipaddress.ip_network("fd00::/64"))


def rules(ingress: DirectionRules = OPEN, egress: DirectionRules = OPEN,
          addresses: tuple[Any, ...] = ADDR_A, key: PodKey = A) -> PodRules:
    return PodRules(PodPolicy(key, NODE, ingress, egress), addresses)


def web() -> DirectionRules:
    return DirectionRules(True, (
        Rule(NETS, (PortRange("TCP", 80, 80), PortRange("TCP", 8000, 8080),
                    PortRange("UDP", 0, 65535)), ("t/p", "t/q")),
        Rule((ipaddress.ip_network("0.0.0.0/0"),), None, ("t/all",)),
    ))


def chain(out: render.Rendered, key: PodKey, direction: render.Dir) -> list[str]:
    return [json.dumps(e) for e in out.chains[render.chain_name(key, direction)]]


def test_a_pod_chain_exempts_then_allows_per_rule_version_and_protocol_then_drops() -> None:
    out = render.render({A: rules(ingress=web())})
    body = out.chains[render.chain_name(A, "ingress")]
    assert body[0] == [{"match": {"op": "==", "left": {"payload": {"protocol": "ip",
                                                                   "field": "saddr"}},
                                  "right": {"set": ["192.168.0.1"]}}},
                       {"return": None}]  # the node's; no IPv6 one: no IPv6 exemption rule
    tcp, udp, tcp6, udp6, everything, drop = body[1:]
    assert tcp[0]["match"]["right"] == {"set": [{"prefix": {"addr": "10.1.0.0", "len": 16}},
                                                "10.0.0.7"]}
    assert tcp[1] == {"match": {"op": "==", "left": {"payload": {"protocol": "tcp",
                                                                 "field": "dport"}},
                                "right": {"set": [80, {"range": [8000, 8080]}]}}}
    assert udp[1] == {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}},
                                "right": "udp"}}
    counters = [render.allow_counter(A, "ingress", p) for p in ("t/p", "t/q")]
    assert tcp[2:] == [{"counter": counters[0]}, {"counter": counters[1]}, {"return": None}]
    assert tcp6[0]["match"]["left"]["payload"]["protocol"] == "ip6"
    assert udp6[1] == udp[1]
    # ports None: the peers alone, no port or protocol match
    assert [list(x) for x in everything] == [["match"], ["counter"], ["return"]]
    assert drop == [{"counter": render.drop_counter(A, "ingress")}, {"drop": None}]
    assert set(out.counters) == {*counters, render.allow_counter(A, "ingress", "t/all"),
                                 render.drop_counter(A, "ingress")}
    # the pod's own addresses are exempt through policy-self, never named in its chain
    own = rules(ingress=web()).addresses
    assert not any(str(a) in json.dumps(body) for a in own)
    assert out.selves == {(a, b) for a in own for b in own if a.version == b.version}
    assert render.render_pod(A, PodRules(rules(ingress=web()).policy, ())).chains == out.chains


def test_default_deny_is_the_exemptions_and_a_drop_and_open_is_nothing() -> None:
    out = render.render({A: rules(egress=DirectionRules(True)), B: rules(addresses=ADDR_B,
                                                                          key=B)})
    assert list(out.chains) == [render.chain_name(A, "egress")]
    assert len(out.chains[render.chain_name(A, "egress")]) == 2  # the node's v4 exempt, drop
    assert out.elements == {("policy-egress4", ADDR_A[0]): render.chain_name(A, "egress"),
                            ("policy-egress6", ADDR_A[1]): render.chain_name(A, "egress")}
    assert out.policed == set(ADDR_A)


def test_only_this_nodes_addresses_are_exempt() -> None:
    # another node's IP (a hostNetwork pod there, or its masquerade) is a peer like any other:
    # denied unless a rule (an ipBlock) allows it
    other = ipaddress.ip_address("192.168.0.2")
    both = DirectionRules(True)
    isolated = PodRules(PodPolicy(A, NODE, both, both), ADDR_A)
    out = render.render({A: isolated})
    for direction in ("ingress", "egress"):
        chain = out.chains[render.chain_name(A, direction)]
        assert chain[0][0]["match"]["right"] == {"set": ["192.168.0.1"]}
    by_address = owners({A: isolated})
    assert allowed(by_address, Flow(6, NODE[0], ADDR_A[0], 80))
    assert not allowed(by_address, Flow(6, other, ADDR_A[0], 80))
    block = Rule((ipaddress.ip_network("192.168.0.2/32"),), None, ("a/nodes",))
    let_in = PodRules(PodPolicy(A, NODE, DirectionRules(True, (block,)), both), ADDR_A)
    assert allowed(owners({A: let_in}), Flow(6, other, ADDR_A[0], 80))


def test_names_are_short_stable_and_per_pod() -> None:
    long = PodKey("n" * 63, "p" * 253)
    assert len(render.allow_counter(long, "ingress", "x" * 300)) < 64
    assert render.chain_name(A, "ingress") != render.chain_name(B, "ingress")
    assert render.owned_by(A, render.drop_counter(A, "egress"))
    assert not render.owned_by(B, render.chain_name(A, "egress"))


def test_the_base_chain_accepts_established_then_egress_then_ingress() -> None:
    cmds = transactions.base("vswitch-cni")
    rules_ = [c["add"]["rule"]["expr"] for c in cmds if "rule" in c.get("add", {})]
    assert rules_[0][-1] == {"accept": None} and "established" in json.dumps(rules_[0])
    assert all(r[-1] == {"drop": None} and '"syn"' in json.dumps(r) for r in rules_[1:5])
    assert [(r[0]["match"]["right"], r[-1]) for r in rules_[5:7]] == [
        ("@policy-self4", {"accept": None}), ("@policy-self6", {"accept": None})]
    assert rules_[5][0]["match"]["left"] == {"concat": [
        {"payload": {"protocol": "ip", "field": "saddr"}},
        {"payload": {"protocol": "ip", "field": "daddr"}}]}
    maps = [r[0]["vmap"]["data"] for r in rules_[7:]]
    assert maps == ["@policy-egress4", "@policy-egress6", "@policy-ingress4",
                    "@policy-ingress6"]
    chain = cmds[1]["add"]["chain"]
    assert (chain["hook"], chain["prio"], chain["policy"]) == ("forward", 0, "accept")


def _ops(cmds: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    out = []
    for c in cmds:
        ((op, body),) = c.items()
        ((kind, obj),) = body.items()
        out.append((op, kind, obj.get("name", obj.get("chain", ""))))
    return out


def test_a_full_transaction_orders_its_deletes_and_keeps_counters() -> None:
    old = render.render({A: rules(ingress=web()), B: rules(ingress=web(), addresses=ADDR_B,
                                                            key=B)})
    new = render.render({A: rules(ingress=web())})
    ops = _ops(transactions.full("vswitch-cni", transactions.installed(old), new))
    flush_maps = max(i for i, o in enumerate(ops) if o[:2] == ("flush", "map"))
    delete_b = ops.index(("delete", "chain", render.chain_name(B, "ingress")))
    assert flush_maps < delete_b
    deletes = [o for o in ops if o[0] == "delete"]
    assert {o[2] for o in deletes if o[1] == "counter"} == set(old.counters) - set(new.counters)
    assert ops[-len([o for o in deletes if o[1] == "counter"]):] == \
        [o for o in deletes if o[1] == "counter"]  # last
    assert not any(o[2] in ("postrouting", "pods4", "keep4") for o in ops)  # NAT's
    assert ("add", "counter", render.allow_counter(A, "ingress", "t/p")) in ops


def test_a_diff_transaction_touches_only_what_changed() -> None:
    both = {A: rules(ingress=web()), B: rules(ingress=web(), addresses=ADDR_B, key=B)}
    now = transactions.installed(render.render(both))
    assert transactions.changes("vswitch-cni", now, render.render(both), with_base=False) == []
    # a's peers change: a's chain alone is rewritten (add, flush, its rules), no element moves
    narrower = DirectionRules(True, web().rules[:1])
    ops = _ops(transactions.changes("vswitch-cni", now, render.render(
        {**both, A: rules(ingress=narrower)}), with_base=False))
    a_in, b_in = render.chain_name(A, "ingress"), render.chain_name(B, "ingress")
    assert ("flush", "chain", a_in) in ops and not any(o[2] == b_in for o in ops)
    assert ("add", "chain", a_in) not in ops  # it exists: adding it costs a read of all chains
    assert not any(o[1] == "element" for o in ops)
    assert ops[-1] == ("delete", "counter", render.allow_counter(A, "ingress", "t/all"))
    # b goes; a takes b's IPv4 address: b's element is deleted before a's is added, b's chain
    # after its elements, its counters last
    moved = render.render({A: rules(ingress=web(), addresses=(*ADDR_A, *ADDR_B))})
    cmds = transactions.changes("vswitch-cni", now, moved, with_base=False)
    ops = _ops(cmds)
    elements = [(op, e) for c in cmds for op, body in c.items() if "element" in body
                for e in body["element"]["elem"] if body["element"]["name"] == "policy-ingress4"]
    assert elements == [("delete", "10.0.0.6"), ("add", ["10.0.0.6", {"jump": {"target": a_in}}])]
    delete_b = ops.index(("delete", "chain", b_in))
    assert all(i < delete_b for i, o in enumerate(ops) if o[1] == "element")
    assert {o[2] for o in ops[delete_b + 1:]} == set(render.render({B: both[B]}).counters)
    assert ("flush", "chain", a_in) not in ops  # a's chain names none of its own addresses
    assert ("add", "element", "policy-self4") in ops  # they are exempt through policy-self
    # a chain known by name only (read from the kernel) is rewritten; with_base adds the base
    read = Installed(set(now.chains), set(now.counters), dict(now.elements), set(now.policed))
    ops = _ops(transactions.changes("vswitch-cni", read, render.render(both)))
    assert {o[2] for o in ops if o[:2] == ("flush", "chain")} == {render.BASE, a_in, b_in}


def test_a_pod_transaction_touches_that_pod_and_its_addresses_only() -> None:
    both = {A: rules(ingress=web()), B: rules(ingress=web(), addresses=ADDR_B, key=B)}
    now = transactions.installed(render.render(both))
    # b is re-added with a's old IPv4 address and without isolation
    cmds, after = transactions.pod("vswitch-cni", B, (ADDR_A[0],), now, render.Rendered())
    ops = _ops(cmds)
    assert ("delete", "chain", render.chain_name(B, "ingress")) in ops
    assert not any(o[0] == "delete" and o[2] == render.chain_name(A, "ingress") for o in ops)
    deleted = [c["delete"]["element"] for c in cmds if "element" in c.get("delete", {})]
    assert {(d["name"], json.dumps(e)) for d in deleted for e in d["elem"]} == {
        ("policy-ingress4", '"10.0.0.5"'), ("policy-ingress4", '"10.0.0.6"'),
        ("policy-pods4", '"10.0.0.5"'), ("policy-pods4", '"10.0.0.6"'),
        ("policy-self4", '{"concat": ["10.0.0.5", "10.0.0.5"]}'),
        ("policy-self4", '{"concat": ["10.0.0.6", "10.0.0.6"]}')}
    assert ("flush", "chain", render.BASE) in ops  # the base objects, by default
    without = _ops(transactions.pod("vswitch-cni", B, (ADDR_A[0],), now, render.Rendered(),
                              with_base=False)[0])
    assert without == [o for o in ops if o[2] not in (render.BASE, "vswitch-cni")
                       and o[1] not in ("map", "set")]
    assert after.chains == {render.chain_name(A, "ingress")}
    assert after.elements == {("policy-ingress6", ADDR_A[1]): render.chain_name(A, "ingress")}
    assert after.policed == {ADDR_A[1]}
    assert after.selves == {(ADDR_A[1], ADDR_A[1])}


def test_the_add_of_a_pod_whose_chains_were_made_before_is_elements_only() -> None:
    early = render.render({A: PodRules(rules(ingress=web()).policy, ())})
    assert early.chains and not early.elements and not early.policed and not early.selves
    now = transactions.installed(early)
    cmds, after = transactions.pod("vswitch-cni", A, ADDR_A, now,
                                   render.render({A: rules(ingress=web())}), with_base=False)
    assert {o[:2] for o in _ops(cmds)} == {("add", "element")}
    assert element_ops(cmds, "inet", "vswitch-cni") is not None  # over netlink
    assert after.policed == set(ADDR_A) and after.chains == now.chains


def test_removal_deletes_every_policy_object_even_when_absent() -> None:
    now = Installed({render.chain_name(A, "egress")}, {render.drop_counter(A, "egress")})
    ops = _ops(transactions.removal("vswitch-cni", now))
    assert ("delete", "chain", render.BASE) in ops and ("add", "chain", render.BASE) in ops
    assert ops[-1] == ("delete", "counter", render.drop_counter(A, "egress"))


def test_the_verdict_reads_the_rules_as_the_chains_do() -> None:
    peer, stranger = ipaddress.ip_address("10.1.2.3"), ipaddress.ip_address("10.9.9.9")
    ports_only = DirectionRules(True, web().rules[:1])
    by = owners({A: rules(ingress=ports_only),
                 B: rules(egress=DirectionRules(True), addresses=ADDR_B, key=B)})
    a4 = ADDR_A[0]
    assert allowed(by, Flow(6, peer, a4, 80))
    assert allowed(by, Flow(6, peer, a4, 8080)) and not allowed(by, Flow(6, peer, a4, 81))
    assert allowed(by, Flow(17, peer, a4, 9)) and not allowed(by, Flow(132, peer, a4, 80))
    assert not allowed(by, Flow(6, stranger, a4, 80)) and not allowed(by, Flow(1, peer, a4, None))
    assert allowed(owners({A: rules(ingress=web())}), Flow(1, stranger, a4, None))  # ports None
    assert allowed(by, Flow(6, NODE[0], a4, 1))  # the node, always
    assert allowed(by, Flow(6, a4, a4, 1))  # the pod itself (hairpin)
    assert not allowed(by, Flow(6, ADDR_B[0], a4, 80))  # b's egress is default deny
    assert allowed(by, Flow(6, ADDR_B[0], NODE[0], 10250))  # ... but for the node
    assert allowed(by, Flow(6, stranger, peer, 1))  # no pod of this node at either end


def test_counters_have_a_meaning_and_a_pod_has_a_view() -> None:
    pods = {A: rules(ingress=web())}
    meaning = meanings(pods)
    assert meaning[render.allow_counter(A, "ingress", "t/q")] == "t/q"
    assert meaning[render.drop_counter(A, "ingress")] == (A, "ingress")
    values = {render.drop_counter(A, "ingress"): Count(3, 180)}
    view = pod_view(A, pods[A], values)
    assert view.egress is None and view.ingress is not None
    assert view.ingress.dropped == Count(3, 180)
    assert set(view.ingress.allowed) == {"t/p", "t/q", "t/all"}
    assert Count(1, 2) + Count(3, 4) == Count(4, 6)


def test_a_change_that_only_allows_more_needs_no_sweep() -> None:
    peers = (ipaddress.ip_network("10.1.0.5/32"), ipaddress.ip_network("fd00::7/128"))
    tcp80 = (PortRange("TCP", 80, 80),)

    def isolated(*rule_list: Rule) -> PodRules:
        return rules(ingress=DirectionRules(True, rule_list))

    base = isolated(Rule(peers, tcp80, ("t/p",)))
    more_peers = isolated(Rule((*peers, ipaddress.ip_network("10.1.0.6/32")), tcp80, ("t/p",)))
    wider = isolated(Rule((ipaddress.ip_network("10.1.0.0/16"), peers[1]), tcp80, ("t/p",)))
    more_ports = isolated(Rule(peers, (PortRange("TCP", 1, 1000),), ("t/p",)))
    all_ports = isolated(Rule(peers, None, ("t/q",)))
    extra_rule = isolated(Rule(peers, tcp80, ("t/p",)), Rule(NETS, None, ("t/q",)))
    for wider_rules in (more_peers, wider, more_ports, all_ports, extra_rule, rules()):
        assert widens(base, wider_rules)
    assert widens(base, base)
    fewer_peers = isolated(Rule(peers[:1], tcp80, ("t/p",)))
    other_port = isolated(Rule(peers, (PortRange("UDP", 80, 80),), ("t/p",)))
    moved = PodRules(base.policy, ADDR_B)
    no_node = PodRules(PodPolicy(A, (), base.policy.ingress, OPEN), ADDR_A)
    for narrower in (fewer_peers, other_port, isolated(), moved, no_node):
        assert not widens(base, narrower)
    assert not widens(rules(), base)  # isolation added
    assert not widens(more_peers, base) and not widens(all_ports, base)


def shared(*members: str, static: tuple[Any, ...] = ()) -> DirectionRules:
    """Ingress from one selector's pods (`members`) and `static` CIDRs, TCP 80."""
    peers = PeerSet("5e1ec7", tuple(ipaddress.ip_address(m) for m in members))
    ports = (PortRange("TCP", 80, 80),)
    return DirectionRules(True, (), (SetRule((peers,), static, ports, ("t/p",)),))


def test_shared_rules_name_each_selectors_set_and_a_member_change_is_elements_only() -> None:
    v4, v6 = render.peer_set_name("5e1ec7", 4), render.peer_set_name("5e1ec7", 6)
    out = render.render({A: rules(ingress=shared("10.0.0.9", static=NETS[:1])),
                         B: rules(ingress=shared("10.0.0.9"), addresses=ADDR_B, key=B)})
    assert out.sets == {v4: {ipaddress.ip_address("10.0.0.9")}, v6: set()}
    text = chain(out, A, "ingress")
    assert [t.count(f'"@{v4}"') for t in text].count(1) == 1
    assert [t.count(f'"@{v6}"') for t in text].count(1) == 1  # no member yet: the rule stands
    assert any('"10.1.0.0"' in t for t in text)  # the static CIDR, inline
    assert not any("10.0.0.9" in t for t in text)  # members live in the set only
    now = transactions.installed(out)
    grown = render.render({A: rules(ingress=shared("10.0.0.9", "fd00::9", static=NETS[:1])),
                           B: rules(ingress=shared("10.0.0.9", "fd00::9"), addresses=ADDR_B,
                                    key=B)})
    cmds = transactions.changes("vswitch-cni", now, grown, with_base=False)
    assert cmds == [{"add": {"element": {"family": "inet", "table": "vswitch-cni", "name": v6,
                                         "elem": ["fd00::9"]}}}]
    # a chain that names a new set: the set first; the set no chain names: after the chains
    fresh = render.render({A: rules(ingress=web())})
    ops = _ops(transactions.changes("vswitch-cni", now, fresh, with_base=False))
    a_in = render.chain_name(A, "ingress")
    assert ops.index(("delete", "set", v4)) > ops.index(("flush", "chain", a_in))
    assert ops.index(("delete", "set", v4)) > ops.index(("delete", "chain",
                                                         render.chain_name(B, "ingress")))
    for cmds in (transactions.full("vswitch-cni", Installed(), out),
                 transactions.pod("vswitch-cni", A, ADDR_A, Installed(), out)[0]):
        ops = _ops(cmds)
        assert ops.index(("add", "set", v4)) < ops.index(("add", "rule", a_in))
        assert ("add", "element", v4) in ops
    _, after = transactions.pod("vswitch-cni", A, ADDR_A, Installed(), out)
    assert after.sets == out.sets
    assert {o for o in _ops(transactions.removal("vswitch-cni", now)) if o[1] == "set"} >= \
        {("delete", "set", v4), ("delete", "set", v6)}


def test_a_set_that_lost_members_sweeps_their_connections_only() -> None:
    two = rules(ingress=shared("10.0.0.9", "10.0.0.10"))
    one = rules(ingress=shared("10.0.0.9"))
    assert to_sweep(one, two) == ()  # grew: nothing to cut
    assert to_sweep(two, one) == (ipaddress.ip_address("10.0.0.10"),)
    assert to_sweep(None, one) == one.addresses  # new to this renderer: all of its own
    assert to_sweep(rules(), two) == two.addresses  # isolated now: all of its own

"""The kernel renderer with real nftables, real pods and real TCP and UDP between them.

Test plan (each on a fresh node namespace with pods a, b, c wired by the kernel driver, IPv4 and
IPv6; policies compiled by `policy.compile_policies`):
- ingress ports: the allowed TCP port and UDP port connect from the allowed pod, another port
  and another pod do not; the other direction (b -> a) is untouched;
- ipBlock with except: the block's pods connect, the excepted one does not;
- named port: resolved against b's container port;
- default deny both ways: nothing in or out of b, ping neither; a <-> c unaffected; the node
  itself still reaches b (kubelet probes: output hook), and a host behind the node whose address
  is one of the node's passes b's chains both ways (the exemption in the chains themselves);
- egress: a may reach c on one TCP port only; a's UDP and other destinations are dropped;
- pod to pod on one node passes both the source's egress and the destination's ingress;
- an established connection survives a change that still allows it and is cut (its conntrack
  entry deleted) by one that denies it; the sweep's read finds the same entries whether it
  searches their bytes for the addresses first (a few addresses) or parses every entry;
- a pod's chains made before its ADD (no address) enforce nothing; its ADD adds elements only
  (no rule handle changes) and isolates it;
- apply_pod isolates a pod from its first packet (the first SYN is counted as dropped), and
  remove_pod lifts it (its elements go, its chain stays until the next full apply); the time
  of apply_pod is measured;
- counters: allowed packets per policy and drops per pod move with the traffic;
- a full apply replaces everything at once: a pod left out loses its chains, kept counters keep
  their counts, remove() leaves nothing of the policy; a removed pod's allow counter is left
  idle (no counter read on a DEL), still counted, until a repairing apply retires it;
- a full apply changes only what changed (nothing: no command; one pod's policy: that pod's
  chain alone, the other's rule handles stay), and repairs a table changed by hand: at once when
  a change's diff fails (the table deleted), at the next read (`verify_every`) otherwise;
- a peer change is a set change: a pod that joins a selector two pods' rules name is one
  element added per IP version to that selector's set, no chain rewritten (rule handles kept),
  and it connects; leaving deletes the elements, refuses it anew and cuts its established
  connection; the chains' rules hold no pod address (they name the set).
"""

from __future__ import annotations

import ipaddress
import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from agent.linux import nlcodec as nl
from agent.linux.nftpolicy import NftPolicy, PodRules, conntrack, render
from agent.linux.nlread import Reader
from testbed.netns import named_netns, ping, run_in, unique
from tests.nftpolicy.conftest import Node, from_pod, key, policy
from tests.nftpolicy.probes import Held, Probe, reach, servers

TCP, UDP = ("tcp", 8080), ("udp", 5353)
OTHER_TCP, OTHER_UDP = ("tcp", 9090), ("udp", 5354)
ALL = (TCP, UDP, OTHER_TCP, OTHER_UDP)


def probes(node: Node, src: str, dst: str, *ports: tuple[str, int]) -> list[Probe]:
    return [Probe(node.netns[src], proto, addr, port)
            for addr in node.ips[dst] for proto, port in ports]


def check(node: Node, expected: dict[tuple[str, str, tuple[str, int]], bool]) -> None:
    """Every (src, dst, port) probed at once, over IPv4 and IPv6; compares with `expected`."""
    cases = [(case, p) for case in expected for p in probes(node, case[0], case[1], case[2])]
    got = reach([p for _, p in cases])
    wrong = [(c, p.addr, g) for (c, p), g in zip(cases, got, strict=True) if g != expected[c]]
    assert not wrong, f"unexpected (case, address, connected): {wrong}"


def test_ingress_allows_its_ports_from_its_peers_only(node: Node, renderer: NftPolicy) -> None:
    renderer.apply(node.desired(policy("b-in", select="b", ingress=[
        {"from": [from_pod("a")], "ports": [{"port": 8080}, {"protocol": "UDP", "port": 5353}]}])))
    with servers(node.netns["b"], node.ips["b"], ALL), servers(node.netns["a"], node.ips["a"], ALL):
        check(node, {("a", "b", TCP): True, ("a", "b", UDP): True,
                     ("a", "b", OTHER_TCP): False, ("a", "b", OTHER_UDP): False,
                     ("c", "b", TCP): False, ("c", "b", UDP): False,
                     ("b", "a", OTHER_TCP): True, ("b", "a", UDP): True})


def test_ip_block_with_except(node: Node, renderer: NftPolicy) -> None:
    block = {"ipBlock": {"cidr": str(node.subnets.v4), "except": [f"{node.ips['a'][0]}/32"]}}
    block6 = {"ipBlock": {"cidr": str(node.subnets.v6), "except": [f"{node.ips['a'][1]}/128"]}}
    renderer.apply(node.desired(policy("b-in", select="b", ingress=[{"from": [block, block6]}])))
    with servers(node.netns["b"], node.ips["b"], (TCP, UDP)):
        check(node, {("c", "b", TCP): True, ("c", "b", UDP): True,
                     ("a", "b", TCP): False, ("a", "b", UDP): False})


def test_named_port_resolves_to_the_pods_container_port(node: Node, renderer: NftPolicy) -> None:
    renderer.apply(node.desired(policy("b-in", select="b", ingress=[
        {"from": [from_pod("a")], "ports": [{"port": "web"}]}])))
    with servers(node.netns["b"], node.ips["b"], (TCP, OTHER_TCP)):
        check(node, {("a", "b", TCP): True, ("a", "b", OTHER_TCP): False})


def test_default_deny_both_ways_and_the_node_is_exempt(node: Node, renderer: NftPolicy) -> None:
    # a host behind the node, whose address the node claims: as VPP's node traffic arrives
    with named_netns("thost") as host:
        end = unique("hv")
        run_in(node.path, "ip", "link", "add", end, "type", "veth", "peer", "name", "eth0",
               "netns", host.rsplit("/", 1)[1])
        run_in(node.path, "ip", "addr", "add", "192.0.2.1/24", "dev", end)
        run_in(node.path, "ip", "link", "set", end, "up")
        for argv in (("addr", "add", "192.0.2.2/24", "dev", "eth0"), ("link", "set", "eth0", "up"),
                     ("route", "add", "default", "via", "192.0.2.1")):
            run_in(host, "ip", *argv)
        node.extra_node_addresses = (ipaddress.ip_address("192.0.2.2"),)
        renderer.apply(node.desired(policy("deny", select="b",
                                           policyTypes=["Ingress", "Egress"])))
        b4 = node.ips["b"][0]
        with servers(node.netns["b"], node.ips["b"], (TCP, UDP)), \
                servers(node.netns["a"], node.ips["a"], (TCP,)), \
                servers(node.netns["c"], node.ips["c"], (TCP,)), \
                servers(host, ["192.0.2.2"], (TCP,)):
            check(node, {("a", "b", TCP): False, ("a", "b", UDP): False,
                         ("b", "a", TCP): False, ("b", "c", TCP): False,
                         ("a", "c", TCP): True, ("c", "a", TCP): True})
            assert not ping(node.netns["a"], b4, retry=False)
            node_probe = [Probe(node.path, "tcp", b4, 8080), Probe(host, "tcp", b4, 8080),
                          Probe(node.netns["b"], "tcp", "192.0.2.2", 8080)]
            assert reach(node_probe) == [True, True, True]


def test_egress_allows_one_destination_port(node: Node, renderer: NftPolicy) -> None:
    renderer.apply(node.desired(policy("a-out", select="a", policyTypes=["Egress"], egress=[
        {"to": [from_pod("c")], "ports": [{"port": 8080}]}])))
    with servers(node.netns["b"], node.ips["b"], ALL), servers(node.netns["c"], node.ips["c"], ALL):
        check(node, {("a", "c", TCP): True, ("a", "c", OTHER_TCP): False,
                     ("a", "c", UDP): False, ("a", "b", TCP): False,
                     ("b", "c", OTHER_TCP): True})


def test_pod_to_pod_passes_the_sources_egress_and_the_destinations_ingress(
        node: Node, renderer: NftPolicy) -> None:
    a_out = policy("a-out", select="a", policyTypes=["Egress"],
                   egress=[{"to": [from_pod("b"), from_pod("c")], "ports": [{"port": 8080}]}])
    b_in = policy("b-in", select="b", ingress=[{"from": [from_pod("c")]}])
    renderer.apply(node.desired(a_out, b_in))
    with servers(node.netns["b"], node.ips["b"], (TCP,)), \
            servers(node.netns["c"], node.ips["c"], (TCP,)):
        # a's egress allows b, b's ingress does not allow a; c passes both
        check(node, {("a", "b", TCP): False, ("a", "c", TCP): True, ("c", "b", TCP): True})


ALLOW_A = policy("b-in", select="b", ingress=[{"from": [from_pod("a")]}])
ALSO_C = policy("b-in-c", select="b", ingress=[{"from": [from_pod("c")]}])


@contextmanager
def held_a_to_b(node: Node) -> Iterator[list[Held]]:
    """TCP connections from a to each of b's addresses, held open for the block."""
    with servers(node.netns["b"], node.ips["b"], (TCP,)):
        held = [Held(node.netns["a"], addr, 8080) for addr in node.ips["b"]]
        try:
            assert all(h.echo() for h in held)
            yield held
        finally:
            for h in held:
                h.close()


def test_established_connections_survive_an_allow_and_are_cut_by_a_deny(
        node: Node, renderer: NftPolicy) -> None:
    renderer.apply(node.desired(ALLOW_A))
    with held_a_to_b(node) as held:
        applied = renderer.apply(node.desired(ALLOW_A, ALSO_C))
        assert applied.conntrack_deleted == 0
        assert all(h.echo() for h in held)  # still allowed: untouched
        applied = renderer.apply(node.desired(ALSO_C))  # a is no longer allowed
        assert applied.conntrack_deleted >= 2, applied  # one per address family
        assert not any(h.echo() for h in held)
        check(node, {("a", "b", TCP): False, ("c", "b", TCP): True})


def test_the_sweeps_read_finds_the_same_entries_with_and_without_its_prefilter(
        node: Node, renderer: NftPolicy, monkeypatch: pytest.MonkeyPatch) -> None:
    renderer.apply(node.desired(ALLOW_A))  # the table's ct rules: the node tracks connections
    with held_a_to_b(node):
        found, shipped = {}, conntrack.PREFILTER_MAX
        for limit in (shipped, 0):  # the search in the bytes first; none
            monkeypatch.setattr(conntrack, "PREFILTER_MAX", limit)
            with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, nl.NETLINK_NETFILTER) as s:
                found[limit] = {
                    (e.flow.src, e.flow.dst, e.flow.port) for family, version in
                    ((socket.AF_INET, 0), (socket.AF_INET6, 1))
                    for e in conntrack.entries(Reader(s), family,
                                               {node.addresses("b")[version].packed})}
        a, b = node.addresses("a"), node.addresses("b")
        assert {(a[0], b[0], 8080), (a[1], b[1], 8080)} <= found[0]
        assert shipped > 0 and found[shipped] == found[0]


def test_a_background_sweep_cuts_them_after_the_change_returns(node: Node) -> None:
    # the agent's mode: a change (or a pod's ADD) never waits for the conntrack sweep
    renderer = NftPolicy(sweep_in_background=True)
    try:
        renderer.apply(node.desired(ALLOW_A))
        with held_a_to_b(node) as held:
            assert renderer.apply(node.desired(ALSO_C)).conntrack_deleted == 0  # not waited for
            deadline = time.monotonic() + 10
            while renderer.swept < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert renderer.swept >= 2  # one per address family, by the sweeper
            assert not any(h.echo() for h in held)
    finally:
        renderer.close()


def test_apply_pod_isolates_from_the_first_packet(node: Node, renderer: NftPolicy) -> None:
    renderer.apply(node.desired(names=("a", "c")))  # b not yet known: an ADD brings it
    deny = policy("deny", select="b")
    rules = node.desired(deny)[key("b")]
    start = time.perf_counter()
    renderer.apply_pod(key("b"), rules)
    took = time.perf_counter() - start
    print(f"apply_pod: {took * 1000:.1f} ms")
    assert took < 0.5
    with servers(node.netns["b"], node.ips["b"], (TCP,)):
        check(node, {("a", "b", TCP): False})
        dropped = renderer.counters().dropped[(key("b"), "ingress")]
        # nothing got through: every SYN (first and retransmitted, both families) was dropped
        assert dropped.packets >= 2
        view = renderer.rules_for(key("b"))
        assert view is not None and view.egress is None and view.ingress is not None
        assert view.ingress.dropped == dropped
        handles = rule_handles(node.path)
        renderer.remove_pod(key("b"))
        check(node, {("a", "b", TCP): True})
        assert renderer.rules_for(key("b")) is None
        # its chain stays, enforcing nothing, until the next full apply (which keeps it while
        # the pod is bound to the node, for its next ADD)
        assert rule_handles(node.path) == handles
        renderer.apply(node.desired(deny, names=("a", "c")))
        assert render.chain_name(key("b"), "ingress") not in rule_handles(node.path)


def test_chains_made_before_the_add_enforce_nothing_until_it(
        node: Node, renderer: NftPolicy) -> None:
    only_a = policy("b-in", select="b", ingress=[{"from": [from_pod("a")]}])
    desired = node.desired(only_a)
    early = {**desired, key("b"): PodRules(desired[key("b")].policy, ())}
    renderer.apply(early)  # b bound to the node, its sandbox not started yet
    handles = rule_handles(node.path)
    assert render.chain_name(key("b"), "ingress") in handles
    with servers(node.netns["b"], node.ips["b"], (TCP, UDP)):
        check(node, {("c", "b", TCP): True})  # no element sends b's traffic to its chain yet
        renderer.apply_pod(key("b"), desired[key("b")])  # the ADD
        assert rule_handles(node.path) == handles  # no chain rewritten: elements only
        check(node, {("a", "b", TCP): True, ("a", "b", UDP): True, ("c", "b", TCP): False,
                     ("c", "b", UDP): False})


def test_counters_follow_the_traffic(node: Node, renderer: NftPolicy) -> None:
    renderer.apply(node.desired(policy("b-in", select="b", ingress=[
        {"from": [from_pod("a")], "ports": [{"port": 8080}]}])))
    with servers(node.netns["b"], node.ips["b"], (TCP, OTHER_TCP)):
        check(node, {("a", "b", TCP): True, ("a", "b", OTHER_TCP): False})
    counts = renderer.counters()
    # only a connection's first packet passes the chain: then `ct state established` accepts
    assert counts.allowed["t/b-in"].packets == 2  # one SYN per address family
    assert counts.dropped[(key("b"), "ingress")].packets >= 2
    assert (key("a"), "ingress") not in counts.dropped  # a is not isolated


def ruleset(path: str) -> dict[str, set[str]]:
    out = json.loads(run_in(path, "nft", "-j", "list", "ruleset").stdout)["nftables"]
    found: dict[str, set[str]] = {}
    for obj in out:
        for kind, body in obj.items():
            if kind in ("chain", "counter", "set", "map"):
                found.setdefault(kind, set()).add(body["name"])
    return found


def test_a_full_apply_replaces_everything_and_remove_leaves_nothing(
        node: Node, renderer: NftPolicy) -> None:
    both = policy("both", select="b", ingress=[{"from": [from_pod("a")]}])
    deny_a = policy("deny-a", select="a")
    renderer.apply(node.desired(both, deny_a))
    with servers(node.netns["b"], node.ips["b"], (TCP,)):
        check(node, {("a", "b", TCP): True})
    before = renderer.counters().allowed["t/both"]
    chains = {c for c in ruleset(node.path)["chain"] if c.startswith("policy-pod-")}
    assert len(chains) == 2  # a's ingress, b's ingress
    renderer.apply(node.desired(both))  # a's policy is gone
    after = ruleset(node.path)
    assert {c for c in after["chain"] if c.startswith("policy-pod-")} < chains
    assert renderer.counters().allowed["t/both"] == before  # kept, not reset
    # b goes: its counter of t/both stays (idle, not read on the DEL) and still counts; the
    # next repairing apply reads it, keeps its value and deletes it
    counter = render.allow_counter(key("b"), "ingress", "t/both")
    renderer.remove_pod(key("b"))
    assert counter in ruleset(node.path)["counter"]
    assert renderer.counters().allowed["t/both"] == before
    renderer.verify_every = 0
    renderer.apply(node.desired(both, names=("a", "c")))
    assert counter not in ruleset(node.path).get("counter", {})
    assert renderer.counters().allowed["t/both"] == before
    renderer.remove()
    assert ruleset(node.path) == {}


def rule_handles(path: str) -> dict[str, set[int]]:
    """The handles of the rules in each pod chain (a rewritten chain's rules get new ones)."""
    out = json.loads(run_in(path, "nft", "-j", "list", "table", "inet", "vswitch-cni").stdout)
    found: dict[str, set[int]] = {}
    for obj in out["nftables"]:
        rule = obj.get("rule")
        if rule and rule["chain"].startswith("policy-pod-"):
            found.setdefault(rule["chain"], set()).add(rule["handle"])
    return found


def test_a_full_apply_changes_only_what_changed_and_repairs_a_table_changed_by_hand(
        node: Node, renderer: NftPolicy) -> None:
    from_a = policy("b-in", select="b", ingress=[{"from": [from_pod("a")]}])
    from_c = policy("b-in", select="b", ingress=[{"from": [from_pod("c")]}])
    deny_a = policy("deny-a", select="a")
    first = renderer.apply(node.desired(from_a, deny_a))
    before = rule_handles(node.path)
    assert renderer.apply(node.desired(from_a, deny_a)).commands == 0  # nothing changed
    changed = renderer.apply(node.desired(from_c, deny_a))
    assert 0 < changed.commands < first.commands
    after = rule_handles(node.path)
    a_in, b_in = (render.chain_name(key(n), "ingress") for n in "ab")
    assert after[a_in] == before[a_in]  # a's chain untouched
    assert not after[b_in] & before[b_in]  # b's rewritten
    with servers(node.netns["b"], node.ips["b"], (TCP,)):
        check(node, {("a", "b", TCP): False, ("c", "b", TCP): True})
    # someone deletes the agent's table: the next change's diff fails, and the renderer reads
    # the kernel and rewrites everything
    run_in(node.path, "nft", "delete", "table", "inet", "vswitch-cni")
    renderer.apply(node.desired(from_a, deny_a))
    assert set(rule_handles(node.path)) == {a_in, b_in}
    with servers(node.netns["b"], node.ips["b"], (TCP,)):
        check(node, {("a", "b", TCP): True, ("c", "b", TCP): False})
    # with nothing to change, only a read (verify_every) finds what was done by hand
    run_in(node.path, "nft", "flush", "chain", "inet", "vswitch-cni", b_in)
    renderer.apply(node.desired(from_a, deny_a))
    assert b_in not in rule_handles(node.path)
    renderer.verify_every = 0
    renderer.apply(node.desired(from_a, deny_a))
    assert set(rule_handles(node.path)) == {a_in, b_in}
    with servers(node.netns["b"], node.ips["b"], (TCP,)):
        check(node, {("a", "b", TCP): True, ("c", "b", TCP): False})


def _peer_sets(path: str) -> dict[str, set[str]]:
    out = json.loads(run_in(path, "nft", "-j", "list", "table", "inet", "vswitch-cni").stdout)
    return {o["set"]["name"]: set(o["set"].get("elem", ())) for o in out["nftables"]
            if "set" in o and o["set"]["name"].startswith(render.PEER_SET)}


def test_a_pod_joining_or_leaving_a_selector_is_a_set_element_and_no_chain_rewritten(
        node: Node, renderer: NftPolicy) -> None:
    clients = {"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}
    # b and a both admit the clients on every port; c is a client from the start
    policies = (policy("b-in", select="b", ingress=[clients]),
                policy("a-in", select="a", ingress=[clients]))
    renderer.apply(node.desired(*policies, labels={"c": {"role": "client"}}))
    before, sets = rule_handles(node.path), _peer_sets(node.path)
    assert len(sets) == 2  # one selector, IPv4 and IPv6: shared by a's and b's chains
    assert set().union(*sets.values()) == set(node.ips["c"])
    listed = json.loads(run_in(node.path, "nft", "-j", "list", "table", "inet",
                               "vswitch-cni").stdout)["nftables"]
    chains = json.dumps([o["rule"] for o in listed
                         if "rule" in o and o["rule"]["chain"].startswith("policy-pod-")])
    assert "@policy-peer-" in chains
    assert not any(f'"{ip}"' in chains for ip in node.ips["c"])  # named by the set only
    # a second client pod: two elements, nothing else
    joined = renderer.apply(node.desired(*policies, labels={
        "c": {"role": "client"}, "b": {"role": "client"}}))
    assert joined.commands == 2, joined
    assert rule_handles(node.path) == before
    assert set().union(*_peer_sets(node.path).values()) == {*node.ips["c"], *node.ips["b"]}
    with servers(node.netns["a"], node.ips["a"], (TCP, UDP)):
        check(node, {("b", "a", TCP): True, ("b", "a", UDP): True, ("c", "a", TCP): True})
        held = Held(node.netns["b"], node.ips["a"][0], TCP[1])
        try:
            assert held.echo()
            left = renderer.apply(node.desired(*policies, labels={"c": {"role": "client"}}))
            assert left.commands == 2, left
            assert left.conntrack_deleted >= 1, left
            assert not held.echo()  # cut: its conntrack entry went with the element
        finally:
            held.close()
        check(node, {("b", "a", TCP): False, ("b", "a", UDP): False, ("c", "a", TCP): True})
    assert rule_handles(node.path) == before

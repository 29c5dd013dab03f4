"""VppPolicy (agent/dataplane/vpp/acl.py) against the fake VPP, which speaks VPP 26.06's acl
messages with the plugin's rules (tests/fakevpp/acl.py).

Plan:
- apply: each pod's input and output ACL made, tagged with the pod, bound as [input], [output];
  the plugin's per-rule counters and session reclassification switched on once per connection;
- nothing changed -> nothing sent; one pod's rules changed -> one acl_add_replace of that ACL
  in place (no rebinding); a pod no policy isolates any more -> its ACLs unbound and deleted;
  a pod left out of the desired state -> the same;
- a new sandbox of the same pod (new sw_if_index): the old interface unbound, the new bound,
  unless VPP gave the old index to another pod already;
- agent restart: a new VppPolicy finds the ACLs by tag, sends nothing for an unchanged desired
  state and deletes the orphans; VPP restart: everything made again;
- DEL: unbound and deleted, also when the interface is gone (VPP unbound it), twice is fine;
  an ACL still on an interface the picture does not know is taken off that list first;
- a pod VPP refuses is reported and the others installed; the ADD path raises (CNI 101);
- installed() and counters() (the stats segment stubbed: the fake has none);
- the fake itself answers as VPP 26.06 does (retvals, the acl_del_reply quirk).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

import pytest

from agent.dataplane.vpp import acl_render
from agent.dataplane.vpp.acl import PodAcl, VppPolicy
from agent.dataplane.vpp.api import VppApi, VppCallFailed
from agent.model.errors import TryAgainLater
from policy import DirectionRules, PodKey, PodPolicy, PortRange, Rule
from tests.fakevpp import API_DIR, FakeVPP

A, B, C = PodKey("web", "a"), PodKey("web", "b"), PodKey("db", "c")
SERVICES = (ipaddress.ip_network("10.96.0.0/12"),)
NODE = (ipaddress.ip_address("172.30.1.2"),)
OPEN = DirectionRules(False)
DENY = DirectionRules(True)


def allow(port: int, peer: str = "10.1.1.0/24") -> DirectionRules:
    rule = Rule((ipaddress.ip_network(peer),), (PortRange("TCP", port, port),), ("web/p",))
    return DirectionRules(True, (rule,))


def podacl(key: PodKey, sw_if_index: int, ingress: DirectionRules = DENY,
           egress: DirectionRules = OPEN, ip: str = "10.1.1.5") -> PodAcl:
    return PodAcl(PodPolicy(key, (), ingress, egress), sw_if_index,
                  (ipaddress.ip_address(ip),))


def connect(fake: FakeVPP) -> VppApi:
    api = VppApi(fake.socket_path, API_DIR, 2.0, 3.0, "acl-test")
    api.connect()
    return api


@pytest.fixture
def api(bare_fake: FakeVPP) -> Iterator[VppApi]:
    api = connect(bare_fake)
    yield api
    api.close()


def loopbacks(api: VppApi, n: int) -> list[int]:
    return [int(api.call("create_loopback", mac_address="00:00:00:00:00:00").sw_if_index)
            for _ in range(n)]


def sent(fake: FakeVPP, since: int) -> list[str]:
    return [r for r in fake.requests[since:] if r != "control_ping"]


def tags(fake: FakeVPP) -> dict[str, int]:
    return {tag: index for index, (tag, _) in fake.acls().items()}


def test_apply_installs_and_binds_each_pods_two_acls(bare_fake: FakeVPP, api: VppApi) -> None:
    sw_a, sw_b, sw_c = loopbacks(api, 3)
    policy = VppPolicy(api, SERVICES, NODE)
    report = policy.apply({A: podacl(A, sw_a), B: podacl(B, sw_b, egress=allow(80)),
                           C: podacl(C, sw_c, ingress=OPEN)})
    assert (report.created, report.bound, report.failed) == (4, 2, {})
    held = tags(bare_fake)
    assert set(held) == {"vswitch-cni/web/a/in", "vswitch-cni/web/a/out",
                         "vswitch-cni/web/b/in", "vswitch-cni/web/b/out"}
    assert bare_fake.acl_lists() == {
        sw_a: ([held["vswitch-cni/web/a/in"]], [held["vswitch-cni/web/a/out"]]),
        sw_b: ([held["vswitch-cni/web/b/in"]], [held["vswitch-cni/web/b/out"]]),
    }
    assert bare_fake.acl_switches() == (True, True)
    _, rules = bare_fake.acls()[held["vswitch-cni/web/b/in"]]
    b = podacl(B, 0, egress=allow(80))
    want = acl_render.render(b.policy, b.addresses, SERVICES, NODE)
    assert want is not None
    assert [acl_render.rule_from_vpp(r).match() for r in rules] == \
        [r.match() for r in want.input]
    installed = policy.installed(B)
    assert installed is not None and installed.sw_if_index == sw_b
    assert installed.rules == want and policy.installed(C) is None


def test_only_changes_cost_requests(bare_fake: FakeVPP, api: VppApi) -> None:
    sw_a, sw_b = loopbacks(api, 2)
    policy = VppPolicy(api, SERVICES, NODE)
    desired = {A: podacl(A, sw_a), B: podacl(B, sw_b)}
    policy.apply(desired)
    before = len(bare_fake.requests)
    report = policy.apply(desired)
    assert sent(bare_fake, before) == [] and report.unchanged == 2
    index = tags(bare_fake)["vswitch-cni/web/a/out"]
    before = len(bare_fake.requests)
    report = policy.apply({**desired, A: podacl(A, sw_a, ingress=allow(443))})
    assert sent(bare_fake, before) == ["acl_add_replace"]
    assert (report.replaced, report.unchanged) == (1, 1)
    assert tags(bare_fake)["vswitch-cni/web/a/out"] == index  # replaced in place, still bound
    before = len(bare_fake.requests)
    report = policy.apply({**desired, A: podacl(A, sw_a, ingress=OPEN)})
    assert sent(bare_fake, before) == ["acl_interface_set_acl_list", "acl_del", "acl_del"]
    assert report.deleted == 2 and sw_a not in bare_fake.acl_lists()
    policy.apply({B: podacl(B, sw_b)})
    assert set(tags(bare_fake)) == {"vswitch-cni/web/b/in", "vswitch-cni/web/b/out"}
    policy.apply({})
    assert bare_fake.acls() == {} and bare_fake.acl_lists() == {}


def test_a_new_sandbox_moves_the_binding(bare_fake: FakeVPP, api: VppApi) -> None:
    old, new, other = loopbacks(api, 3)
    policy = VppPolicy(api, SERVICES, NODE)
    policy.apply({A: podacl(A, old)})
    indexes = tags(bare_fake)
    policy.apply_pod(A, podacl(A, new))
    assert tags(bare_fake) == indexes
    assert set(bare_fake.acl_lists()) == {new}
    # VPP gave the old index to another pod meanwhile: its ACLs stay when A moves again.
    policy.apply_pod(B, podacl(B, old))
    policy.apply_pod(A, podacl(A, other))
    assert set(bare_fake.acl_lists()) == {old, other}


def test_an_agent_restart_finds_its_acls_and_deletes_orphans(
    bare_fake: FakeVPP, api: VppApi
) -> None:
    sw_a, sw_b, sw_c = loopbacks(api, 3)
    desired = {A: podacl(A, sw_a), B: podacl(B, sw_b, egress=allow(53)), C: podacl(C, sw_c)}
    VppPolicy(api, SERVICES, NODE).apply(desired)
    foreign = int(api.call("acl_add_replace", acl_index=0xFFFFFFFF, tag="operator's",
                           count=0, r=[]).acl_index)
    again = connect(bare_fake)  # the restarted agent's own connection
    try:
        policy = VppPolicy(again, SERVICES, NODE)
        before = len(bare_fake.requests)
        report = policy.apply({A: desired[A], B: desired[B]})
        assert "acl_add_replace" not in sent(bare_fake, before)
        assert report.deleted == 2 and report.unchanged == 2
        assert {t for t in tags(bare_fake) if "/c/" in t} == set()
        assert sw_c not in bare_fake.acl_lists() and foreign in bare_fake.acls()
        assert set(bare_fake.acl_lists()) == {sw_a, sw_b}
        installed = policy.installed(B)  # the reasons come back with the first apply
        assert installed is not None and "service" in [r.reason for r in installed.rules.input]
    finally:
        again.close()


def test_a_vpp_restart_makes_everything_again(bare_fake: FakeVPP, api: VppApi) -> None:
    policy = VppPolicy(api, SERVICES, NODE)
    policy.apply({A: podacl(A, loopbacks(api, 1)[0])})
    bare_fake.restart()
    with pytest.raises(TryAgainLater):  # the broken connection is noticed, then dropped
        api.call("control_ping")
    sw_a = loopbacks(api, 1)[0]  # the driver's repair gave the pod a new interface
    report = policy.apply({A: podacl(A, sw_a)})
    assert (report.created, report.bound) == (2, 1)
    assert set(bare_fake.acl_lists()) == {sw_a} and bare_fake.acl_switches() == (True, True)


def test_del_tolerates_a_gone_interface_and_repeats(bare_fake: FakeVPP, api: VppApi) -> None:
    sw_a, sw_b = loopbacks(api, 2)
    policy = VppPolicy(api, SERVICES, NODE)
    policy.apply({A: podacl(A, sw_a), B: podacl(B, sw_b)})
    api.call("delete_loopback", sw_if_index=sw_a)  # VPP unbinds the ACLs with the interface
    policy.remove_pod(A)
    policy.remove_pod(A)
    assert {t for t in tags(bare_fake) if "/a/" in t} == set()
    policy.remove_pod(B)
    assert bare_fake.acls() == {} and bare_fake.acl_lists() == {}


def test_an_acl_on_an_unknown_interface_is_taken_off_its_list(
    bare_fake: FakeVPP, api: VppApi
) -> None:
    sw_a, stray = loopbacks(api, 2)
    policy = VppPolicy(api, SERVICES, NODE)
    policy.apply({A: podacl(A, sw_a)})
    out = tags(bare_fake)["vswitch-cni/web/a/out"]
    foreign = int(api.call("acl_add_replace", acl_index=0xFFFFFFFF, tag="x", count=0,
                           r=[]).acl_index)
    api.call("acl_interface_set_acl_list", sw_if_index=stray, count=2, n_input=1,
             acls=[foreign, out])
    policy.remove_pod(A)
    assert bare_fake.acl_lists() == {stray: ([foreign], [])}


def test_a_refused_pod_is_reported_and_the_others_installed(
    bare_fake: FakeVPP, api: VppApi
) -> None:
    sw_a, sw_b = loopbacks(api, 2)
    policy = VppPolicy(api, SERVICES, NODE)
    policy.apply({})  # connected and synced: the next acl_add_replace is A's first
    bare_fake.fail_once("acl_add_replace", -7)
    report = policy.apply({A: podacl(A, sw_a), B: podacl(B, sw_b)})
    assert set(report.failed) == {A} and "retval -7" in report.failed[A]
    assert set(bare_fake.acl_lists()) == {sw_b}
    assert policy.apply({A: podacl(A, sw_a), B: podacl(B, sw_b)}).failed == {}
    assert set(bare_fake.acl_lists()) == {sw_a, sw_b}
    bare_fake.fail_once("acl_interface_set_acl_list", -2)
    with pytest.raises(VppCallFailed) as caught:
        policy.apply_pod(C, podacl(C, 9999))
    assert caught.value.code == 101


class StubCounters:
    def __init__(self) -> None:
        self.by_index: dict[int, list[tuple[int, int]]] = {}

    def acl_matches(self, acl_index: int) -> list[tuple[int, int]] | None:
        return self.by_index.get(acl_index, [])


def test_counters_name_each_rule(bare_fake: FakeVPP, api: VppApi) -> None:
    stats = StubCounters()
    policy = VppPolicy(api, SERVICES, NODE, stats=stats)
    assert VppPolicy(api, SERVICES, NODE).counters() == {}
    policy.apply({A: podacl(A, loopbacks(api, 1)[0], ingress=allow(80))})
    held = tags(bare_fake)
    rules = acl_render.render(podacl(A, 0, ingress=allow(80)).policy,
                              (ipaddress.ip_address("10.1.1.5"),), SERVICES, NODE)
    assert rules is not None
    # VPP keeps one more counter than rules.
    stats.by_index[held["vswitch-cni/web/a/out"]] = [(i, 100 * i) for i in
                                                     range(len(rules.output) + 1)]
    got = policy.counters()[A]
    ingress = [c for c in got if c.direction == "ingress"]
    assert [(c.rule.reason, c.packets) for c in ingress] == \
        [(r.reason, i) for i, r in enumerate(rules.output)]
    assert {c.packets for c in got if c.direction == "egress"} == set()


def test_the_fake_answers_as_vpp_does(bare_fake: FakeVPP, api: VppApi) -> None:
    """Retvals and replies seen on a real VPP 26.06 (tests/fakevpp/acl.py)."""
    def retval(name: str, **fields: Any) -> int:
        try:
            api.call(name, **fields)
        except VppCallFailed as exc:
            return exc.retval
        return 0

    sw = loopbacks(api, 1)[0]
    rule = acl_render.AclRule(1, ipaddress.ip_network("0.0.0.0/0"),
                              ipaddress.ip_network("10.0.0.0/8")).fields()
    index = int(api.call("acl_add_replace", acl_index=0xFFFFFFFF, tag="t", count=1,
                         r=[rule]).acl_index)
    assert retval("acl_add_replace", acl_index=99, tag="t", count=0, r=[]) == -6
    bad = {**rule, "src_prefix": ipaddress.ip_network("::/0")}
    assert retval("acl_add_replace", acl_index=0xFFFFFFFF, tag="t", count=1, r=[bad]) == -57
    bad = {**rule, "dstport_or_icmpcode_first": 9, "dstport_or_icmpcode_last": 8}
    assert retval("acl_add_replace", acl_index=0xFFFFFFFF, tag="t", count=1, r=[bad]) == -8
    assert retval("acl_del", acl_index=99) == -6
    assert retval("acl_interface_set_acl_list", sw_if_index=999, count=0, n_input=0,
                  acls=[]) == -2
    assert retval("acl_interface_set_acl_list", sw_if_index=sw, count=1, n_input=1,
                  acls=[99]) == -6
    assert retval("acl_interface_set_acl_list", sw_if_index=sw, count=2, n_input=2,
                  acls=[index, index]) == 1
    api.call("acl_interface_set_acl_list", sw_if_index=sw, count=1, n_input=0, acls=[index])
    assert retval("acl_del", acl_index=index) == -143
    details = api.dump("acl_interface_list_dump", sw_if_index=sw)
    assert [(d.count, d.n_input, list(d.acls)) for d in details] == [(1, 0, [index])]
    assert api.dump("acl_interface_list_dump", sw_if_index=999) == []
    assert type(api.call("acl_stats_intf_counters_enable", enable=True)).__name__ == \
        "acl_del_reply"
    assert retval("cli_inband", cmd="set acl-plugin bogus 1") == -1
    api.call("acl_interface_set_acl_list", sw_if_index=sw, count=0, n_input=0, acls=[])
    api.call("acl_del", acl_index=index)
    again = int(api.call("acl_add_replace", acl_index=0xFFFFFFFF, tag="u", count=0,
                         r=[]).acl_index)
    assert again == index  # VPP's pool hands out the freed index first

"""Service translation in VPP's cnat plugin (agent/dataplane/vpp/cnat.py, cnat_node.py)
against the fake VPP, which speaks VPP 26.06's cnat messages (tests/fakevpp/cnat.py).

Plan:
- apply installs one translation per key, VIP and paths as VPP gives them back (source kept);
  nothing changed -> nothing sent; changed backends -> one update in place (same id); a key no
  longer desired -> deleted; a translation VPP refuses is reported and the others installed;
- a NodePort, externalIP or LoadBalancer address is a real IP (cnat interposes), a ClusterIP is
  not; ClientIP affinity is Maglev over the client's address; a change of either is a delete
  and a new translation (VPP keeps both from the creation), and after an agent restart the
  affinity read back (lb_type) leaves an unchanged one alone;
- agent restart: a new renderer reads VPP's translations back, sends nothing for the unchanged
  and deletes the stale; VPP restart: the next apply after the reconnect makes all again;
- the driver with cnat on: at start the hairpin SNAT entry (last usable pod-subnet address per
  family, return table = the pod VRF's FIB index, checked when ID and index differ), the k8s
  policy, the interconnect in the host table with the feature once; each pod interface gets the
  feature once and joins the pod table; apply's sweep over pod interfaces enables none twice;
  a VPP without cnat is named at start;
- the fake: enabling twice counts twice (as VPP's feature arcs do), FEATURE_DISABLED without an
  SNAT entry.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from agent.dataplane.undo import UndoStack
from agent.dataplane.vpp import VppDataplane, cnat_node, names
from agent.dataplane.vpp.api import VppApi, VppCallFailed
from agent.dataplane.vpp.cnat import Held, VppServices, decode
from agent.model.errors import DataplaneFailure, TryAgainLater
from services import NODE_PORT, Backend, Translation, TranslationKey
from testbed.pods import vpp_pod as pod
from tests.fakevpp import API_DIR, FakeVPP

ip = ipaddress.ip_address
Factory = Callable[..., VppDataplane]
WEB = TranslationKey(ip("10.96.0.10"), 80, "TCP")
DNS = TranslationKey(ip("10.96.0.10"), 53, "UDP")
WEB6 = TranslationKey(ip("fd00:96::10"), 80, "TCP")


def tr(key: TranslationKey, *backends: str, port: int = 8080) -> Translation:
    return Translation(key, tuple(sorted(Backend(ip(b), port) for b in backends)), "ns/web")


@pytest.fixture
def api(bare_fake: FakeVPP) -> Iterator[VppApi]:
    api = VppApi(bare_fake.socket_path, API_DIR, 2.0, 3.0, "cnat-test")
    api.connect()
    yield api
    api.close()


def held(fake: FakeVPP) -> dict[TranslationKey, tuple[int, tuple[Backend, ...]]]:
    out = {}
    for ident, t in fake.cnat().translations.items():
        assert t["vip"]["sw_if_index"] == 0xFFFFFFFF
        assert all(int(p["src_ep"]["addr"]) == 0 and p["src_ep"]["port"] == 0 for p in t["paths"])
        protocol = {6: "TCP", 17: "UDP"}[t["ip_proto"]]
        key = TranslationKey(t["vip"]["addr"], t["vip"]["port"], protocol)
        out[key] = (ident, tuple(sorted(Backend(p["dst_ep"]["addr"], p["dst_ep"]["port"])
                                        for p in t["paths"])))
    return out


def sent(fake: FakeVPP, since: int) -> list[str]:
    return [r for r in fake.requests[since:] if r != "control_ping"]


def test_install_diff_and_delete(bare_fake: FakeVPP, api: VppApi) -> None:
    renderer = VppServices(api)
    want = {WEB: tr(WEB, "10.1.1.2", "10.1.2.3"), DNS: tr(DNS, "10.1.1.2", port=5353),
            WEB6: tr(WEB6, "fd00:1::2")}
    report = renderer.apply(want)
    assert (report.created, report.failed) == (3, {})
    got = held(bare_fake)
    assert {k: b for k, (_, b) in got.items()} == {k: t.backends for k, t in want.items()}
    assert renderer.installed() == {k: t.backends for k, t in want.items()}
    mark = len(bare_fake.requests)
    assert renderer.apply(want).unchanged == 3
    assert sent(bare_fake, mark) == []
    web_id = got[WEB][0]
    want[WEB] = tr(WEB, "10.1.2.3")
    del want[DNS]
    mark = len(bare_fake.requests)
    report = renderer.apply(want)
    assert (report.updated, report.deleted, report.unchanged) == (1, 1, 1)
    assert sorted(sent(bare_fake, mark)) == ["cnat_translation_del", "cnat_translation_update"]
    assert held(bare_fake)[WEB] == (web_id, (Backend(ip("10.1.2.3"), 8080),))
    assert DNS not in held(bare_fake)


def test_refused_translation_is_reported(bare_fake: FakeVPP, api: VppApi) -> None:
    bare_fake.fail_once("cnat_translation_update", -7)
    report = VppServices(api).apply({DNS: tr(DNS, "10.1.1.2"), WEB: tr(WEB, "10.1.1.3")})
    assert list(report.failed) == [DNS] and "retval -7" in report.failed[DNS]
    assert set(held(bare_fake)) == {WEB}


def test_agent_restart_keeps_the_unchanged_and_deletes_the_stale(
        bare_fake: FakeVPP, api: VppApi) -> None:
    VppServices(api).apply({WEB: tr(WEB, "10.1.1.2"), DNS: tr(DNS, "10.1.1.2")})
    ids = {k: i for k, (i, _) in held(bare_fake).items()}
    mark = len(bare_fake.requests)
    report = VppServices(api).apply({WEB: tr(WEB, "10.1.1.2")})  # a new agent
    assert (report.unchanged, report.deleted, report.created) == (1, 1, 0)
    assert sent(bare_fake, mark) == ["cnat_translation_dump", "cnat_translation_del"]
    assert {k: i for k, (i, _) in held(bare_fake).items()} == {WEB: ids[WEB]}


def test_vpp_restart_makes_everything_again(bare_fake: FakeVPP, api: VppApi) -> None:
    renderer = VppServices(api)
    want = {WEB: tr(WEB, "10.1.1.2"), WEB6: tr(WEB6, "fd00:1::2")}
    renderer.apply(want)
    bare_fake.restart()
    with pytest.raises(TryAgainLater):
        renderer.apply(want)
    assert held(bare_fake) == {}
    assert renderer.apply(want).created == 2
    assert {k: b for k, (_, b) in held(bare_fake).items()} == \
        {k: t.backends for k, t in want.items()}


def test_decode_leaves_out_what_the_agent_never_makes(bare_fake: FakeVPP, api: VppApi) -> None:
    VppServices(api).apply({WEB: tr(WEB, "10.1.1.2")})
    [details] = api.dump("cnat_translation_dump")
    assert decode(details) == (WEB, Held(0, (Backend(ip("10.1.1.2"), 8080),), None, False))


NODE_WEB = TranslationKey(ip("192.168.16.1"), 30080, "TCP")


def test_real_ips_and_affinity(bare_fake: FakeVPP, api: VppApi) -> None:
    renderer = VppServices(api)
    plain, node = tr(WEB, "10.1.1.2", "10.1.2.3"), tr(NODE_WEB, "10.1.1.2", "10.1.2.3")
    node = replace(node, kind=NODE_PORT)
    renderer.apply({WEB: plain, NODE_WEB: node})
    made = {(t["vip"]["port"]): t for t in bare_fake.cnat().translations.values()}
    assert (made[80]["is_real_ip"], made[80]["lb_type"], made[80]["flow_hash_config"]) == (0, 0, 0)
    assert made[30080]["is_real_ip"] == 1
    # affinity on: VPP keeps the flow hash from the creation, so delete and make again
    sticky = {WEB: replace(plain, affinity=True), NODE_WEB: node}
    mark = len(bare_fake.requests)
    report = renderer.apply(sticky)
    assert sent(bare_fake, mark) == ["cnat_translation_del", "cnat_translation_update"]
    assert (report.created, report.unchanged) == (1, 1)
    made = {(t["vip"]["port"]): t for t in bare_fake.cnat().translations.values()}
    assert (made[80]["lb_type"], made[80]["flow_hash_config"]) == (1, 0x01)
    assert renderer.installed() == {WEB: plain.backends, NODE_WEB: node.backends}
    # an agent restart reads the affinity back (lb_type); is_real_ip is not read back
    mark = len(bare_fake.requests)
    assert VppServices(api).apply(sticky).unchanged == 2
    assert sent(bare_fake, mark) == ["cnat_translation_dump"]
    mark = len(bare_fake.requests)
    VppServices(api).apply({WEB: plain, NODE_WEB: node})  # affinity off again: made again
    assert sent(bare_fake, mark) == ["cnat_translation_dump", "cnat_translation_del",
                                     "cnat_translation_update"]


def test_driver_sets_cnat_up_and_enables_each_pod_once(
        fake: FakeVPP, driver_factory: Factory, pod_ns: str) -> None:
    dp = driver_factory(cnat=True, pod_vrf_id=5,
                        pod_gateways=(ipaddress.ip_interface("10.1.1.1/24"),
                                      ipaddress.ip_interface("fd00:1::1/64")))
    dp.start()
    state = fake.cnat()
    assert state.snat["ip4"] == ip("10.1.1.254")
    assert state.snat["ip6"] == ip("fd00:1::ffff:ffff:ffff:fffe")
    assert state.snat["ret4"] == state.snat["ret6"] == 1 and state.snat["default"]  # index of 5
    assert state.policy == cnat_node.SNAT_POLICY_K8S
    host = fake.interface_by_tag(names.HOST_TAG)
    assert host is not None
    assert state.if_tables[cnat_node.TABLE_HOST] == {host.sw_if_index}
    assert state.features == {host.sw_if_index: 1}
    assert len(fake.interfaces()) == 3  # local0, the gateway, the interconnect: no scratch
    p = pod(pod_ns, "10.1.1.5/32")
    wiring = dp.attach(p, UndoStack())
    sw = int(wiring.extra["sw_if_index"])
    state = fake.cnat()
    assert state.features[sw] == 1 and sw in state.if_tables[cnat_node.TABLE_POD]
    report = VppServices(dp.api, dp.ensure).apply({WEB: tr(WEB, "10.1.1.5")}, [sw])
    assert report.enabled == 1 and fake.cnat().features[sw] == 1  # asked first, not again
    dp.detach(p, wiring)
    assert sw not in fake.cnat().features


def test_driver_names_a_vpp_without_cnat(fake: FakeVPP, driver_factory: Factory) -> None:
    fake.without_plugin("cnat")
    with pytest.raises(DataplaneFailure, match="cnat"):
        driver_factory(cnat=True).start()


def test_fake_counts_each_enable_and_needs_the_snat_entry(bare_fake: FakeVPP, api: VppApi) -> None:
    sw = int(api.call("create_loopback", mac_address="00:00:00:00:00:00").sw_if_index)
    with pytest.raises(VppCallFailed) as caught:
        cnat_node.enable(api, sw)
    assert caught.value.retval == -30
    assert bare_fake.cnat().features[sw] == 1  # VPP enabled the feature before the refusal
    for _ in range(2):
        api.call("feature_cnat_enable_disable", sw_if_index=sw, enable_disable=True)
    assert bare_fake.cnat().features[sw] == 3
    assert api.call("feature_is_enabled", arc_name="ip4-unicast", feature_name="cnat-input-ip4",
                    sw_if_index=sw).is_enabled

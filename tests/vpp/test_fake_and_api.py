"""The fake VPP's protocol and the driver's call helper (api.py), without namespaces.

Plan: definitions fetched from the fake (`bootstrapapi`, api_dir None) work; a field VPP's schema
does not have and a message VPP does not have are DataplaneFailures naming them; a retval becomes
a DataplaneFailure with the message, retval and meaning; a dump ends at control_ping like VPP's;
pod tags fit VPP's 63 characters; bad config values name their key. A pipeline sends its
requests together: each is carried out and timed, the first refusal is raised with its context
after the rest were carried out, a request the schema refuses (or a dump, or a block that raises)
sends nothing, and a VPP gone midway is TryAgainLater.
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
from typing import Any

import pytest

from agent.dataplane.vpp import VppConfig, ip, names
from agent.dataplane.vpp.api import NO_SUCH_ENTRY, VppApi, VppCallFailed
from agent.model.errors import DataplaneFailure, InvalidConfig, TryAgainLater
from agent.model.pod import PodKey
from tests.fakevpp import API_DIR, FakeVPP


def _api(fake: FakeVPP, api_dir: str | None = API_DIR) -> VppApi:
    return VppApi(fake.socket_path, api_dir, 2.0, 3.0, "test")


def test_bootstrap_definitions_from_vpp(bare_fake: FakeVPP) -> None:
    api = _api(bare_fake, None)
    try:
        assert api.call("show_version").version == "26.06-fake"
        assert "get_api_json" in bare_fake.requests
    finally:
        api.close()


def test_schema_and_retval_errors(bare_fake: FakeVPP) -> None:
    api = _api(bare_fake)
    try:
        with pytest.raises(DataplaneFailure, match="bogus"):
            api.call("sw_interface_set_flags", sw_if_index=0, bogus=1)
        with pytest.raises(DataplaneFailure, match="no API message delete_tap_v2"):
            api.call("delete_tap_v2", sw_if_index=0)
        with pytest.raises(DataplaneFailure) as err:
            api.call("sw_interface_set_table", sw_if_index=0, vrf_id=42, is_ipv6=False)
        assert "sw_interface_set_table" in str(err.value)
        assert "retval -3 (no such FIB / VRF)" in str(err.value)
        with pytest.raises(DataplaneFailure, match="retval -2"):
            api.call("sw_interface_set_flags", sw_if_index=99, flags=1)
    finally:
        api.close()


def test_dump_and_vpp_rules(bare_fake: FakeVPP) -> None:
    api = _api(bare_fake)
    try:
        sw = int(api.call("create_loopback", mac_address="02:00:00:00:00:01").sw_if_index)
        assert [d.interface_name for d in api.dump("sw_interface_dump")] == ["local0", "loop0"]
        api.call("sw_interface_add_del_address", sw_if_index=sw, is_add=True,
                 prefix=ipaddress.ip_interface("10.9.0.1/24"))
        api.call("ip_table_add_del", is_add=True, table={"table_id": 7, "is_ip6": False})
        # VPP refuses a table change on an interface with addresses.
        with pytest.raises(DataplaneFailure, match="retval -114"):
            api.call("sw_interface_set_table", sw_if_index=sw, vrf_id=7, is_ipv6=False)
        # af_packet needs the Linux interface to exist.
        with pytest.raises(DataplaneFailure, match="retval -71"):
            api.call("af_packet_create_v3", host_if_name="no-such-if9", mode=1)
    finally:
        api.close()


def test_unreachable_vpp_is_try_again_later() -> None:
    with tempfile.TemporaryDirectory() as d:
        api = VppApi(os.path.join(d, "none.sock"), API_DIR, 1.0, 1.0, "test")
        with pytest.raises(TryAgainLater, match="not reachable"):
            api.call("show_version")


def test_pod_tag_fits_vpp() -> None:
    key = PodKey("a" * 64, "eth0")
    tag = names.pod_tag(key)
    assert len(tag) <= 63 and tag.endswith(":eth0") and tag.startswith("vswitch-cni:aaa")
    assert tag != names.pod_tag(PodKey("a" * 63 + "b", "eth0"))
    assert names.pod_tag(PodKey("abc", "eth1")) == "vswitch-cni:abc:eth1"


@pytest.mark.parametrize(
    ("field", "value"),
    [("mtu", 70000), ("tap_rx_ring_size", 100), ("pod_gateways", ()), ("tap_version", 1),
     ("host_ifname", "x" * 16), ("api_socket", "relative.sock")],
)
def test_bad_config_names_the_field(field: str, value: object) -> None:
    kw: dict[str, object] = {"pod_gateways": (ipaddress.ip_interface("10.1.1.1/24"),)}
    kw[field] = value
    with pytest.raises(InvalidConfig, match=field):
        VppConfig(**kw)  # type: ignore[arg-type]


def test_a_pipeline_sends_its_requests_together(bare_fake: FakeVPP) -> None:
    api = _api(bare_fake)
    timed: list[tuple[str, float]] = []
    api.observe = lambda name, seconds: timed.append((name, seconds))
    try:
        loops = [int(api.call("create_loopback", mac_address=f"02:00:00:00:00:0{i}").sw_if_index)
                 for i in (1, 2)]
        timed.clear()
        with api.pipeline() as batch:
            for sw in loops:
                batch.call("sw_interface_set_flags", sw_if_index=sw, flags=1)
            batch.call("sw_interface_set_mtu", sw_if_index=loops[0], mtu=[1400, 0, 0, 0])
            assert "sw_interface_set_mtu" not in bare_fake.requests  # queued, not sent yet
        assert [name for name, _ in timed] == ["sw_interface_set_flags"] * 2 + [
            "sw_interface_set_mtu"] and all(seconds >= 0 for _, seconds in timed)
        up = {d.sw_if_index: d.flags for d in api.dump("sw_interface_dump")}
        assert all(up[sw] & 1 for sw in loops)

        # the first refusal is raised, with its context; the requests after it were carried out
        with pytest.raises(DataplaneFailure) as err, api.pipeline() as batch:
            batch.call("sw_interface_set_flags", sw_if_index=loops[0], flags=0)
            batch.call("sw_interface_set_table", sw_if_index=loops[0], vrf_id=42,
                       is_ipv6=False, context="VRF 42 for loop0")
            batch.call("sw_interface_set_flags", sw_if_index=99, flags=1)
            batch.call("sw_interface_set_flags", sw_if_index=loops[1], flags=0)
        assert "sw_interface_set_table" in str(err.value) and "VRF 42 for loop0" in str(err.value)
        assert "retval -3" in str(err.value)
        down = {d.sw_if_index: d.flags for d in api.dump("sw_interface_dump")}
        assert not any(down[sw] & 1 for sw in loops)
    finally:
        api.close()


def test_a_pipeline_that_cannot_be_sent_whole_sends_nothing(bare_fake: FakeVPP) -> None:
    api = _api(bare_fake)
    try:
        sw = int(api.call("create_loopback", mac_address="02:00:00:00:00:01").sw_if_index)
        sent = len(bare_fake.requests)
        bad: list[tuple[str, dict[str, Any], str]] = [
            ("sw_interface_set_flags", {"sw_if_index": sw, "bogus": 1}, "bogus"),
            ("delete_tap_v2", {"sw_if_index": 0}, "no API message"),
            ("sw_interface_dump", {}, "is a dump")]
        for name, fields, match in bad:
            with pytest.raises(DataplaneFailure, match=match), api.pipeline() as batch:
                batch.call("sw_interface_set_flags", sw_if_index=sw, flags=1)
                batch.call(name, **fields)
        # the block itself fails: nothing is sent
        with pytest.raises(RuntimeError), api.pipeline() as batch:
            batch.call("sw_interface_set_flags", sw_if_index=sw, flags=1)
            raise RuntimeError("the caller's own failure")
        assert len(bare_fake.requests) == sent
        assert not {d.sw_if_index: d.flags for d in api.dump("sw_interface_dump")}[sw] & 1
    finally:
        api.close()


def test_a_pipeline_to_a_vpp_that_went_away_is_try_again_later(bare_fake: FakeVPP) -> None:
    api = _api(bare_fake)
    try:
        api.call("show_version")
        bare_fake.stop()
        with pytest.raises(TryAgainLater, match="sw_interface_set_flags"), \
                api.pipeline() as batch:
            batch.call("sw_interface_set_flags", sw_if_index=0, flags=1)
        assert not api.connected
    finally:
        api.close()


def test_requests_sent_together_tell_no_such_entry_apart_from_a_refusal(
    bare_fake: FakeVPP,
) -> None:
    api = _api(bare_fake)
    try:
        sw = int(api.call("create_loopback", mac_address="02:00:00:00:00:01").sw_if_index)
        here, gone = ipaddress.ip_network("10.9.0.1/32"), ipaddress.ip_network("10.9.0.2/32")
        ip.add_route(api, 0, here, ip.via_interface(here, sw))
        found = api.call_all_present([ip.lookup_request(0, p) for p in (here, gone)])
        assert found[1] is None and found[0] is not None
        assert ip.from_reply(found[0]).sw_if_indexes == (sw,)
        # a delete of what is gone is done; a refusal of another kind raises, and the
        # requests after it were carried out
        assert api.call_all_present([ip.delete_route_request(0, gone)]) == [None]
        with pytest.raises(VppCallFailed) as refused:
            api.call_all_present([("sw_interface_set_flags", {"sw_if_index": 999, "flags": 1}),
                                  ip.delete_route_request(0, here)])
        assert refused.value.retval != NO_SUCH_ENTRY
        assert ip.route(api, 0, here) is None
    finally:
        api.close()

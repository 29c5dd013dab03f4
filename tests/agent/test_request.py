"""Request validation: every identity field by the CNI spec's rules, with the spec's codes.

Plan: a good request parses (CNI_ARGS split, pod UID taken from the field or K8S_POD_UID);
each bad container ID, ifname, netns, config and CNI_ARGS gives its code and names the field.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.errors import CniError
from agent.request import parse
from agent.server import valid_attachments

GOOD = {
    "version": "1.0.0",
    "container_id": "abc123",
    "netns": "/var/run/netns/cni-1234",
    "ifname": "eth0",
    "config_json": json.dumps({"cniVersion": "1.0.0", "name": "n", "type": "vswitch-cni"}),
    "cni_args": "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_UID=u-1",
}


def fields(**overrides: str) -> dict[str, str]:
    return {**GOOD, **overrides}


def test_good_request() -> None:
    req = parse("ADD", **fields())
    assert req.key.container_id == "abc123"
    assert (req.pod_namespace, req.pod_name, req.pod_uid) == ("default", "web", "u-1")
    assert req.cni_version == "1.0.0"


def test_any_absolute_netns_path_is_accepted() -> None:
    for path in ("/proc/4242/ns/net", "/run/netns/x", "/var/run/netns/cni-a-b-c"):
        assert parse("ADD", **fields(netns=path)).netns == path


def test_del_may_omit_netns() -> None:
    assert parse("DEL", **fields(netns="")).netns == ""


@pytest.mark.parametrize(
    ("override", "code", "named"),
    [
        ({"container_id": ""}, 4, "CNI_CONTAINERID"),
        ({"container_id": "../etc"}, 4, "CNI_CONTAINERID"),
        ({"container_id": "a/b"}, 4, "CNI_CONTAINERID"),
        ({"container_id": "-lead"}, 4, "CNI_CONTAINERID"),
        ({"ifname": ""}, 4, "CNI_IFNAME"),
        ({"ifname": "a" * 16}, 4, "CNI_IFNAME"),
        ({"ifname": ".."}, 4, "CNI_IFNAME"),
        ({"ifname": "eth/0"}, 4, "CNI_IFNAME"),
        ({"ifname": "eth 0"}, 4, "CNI_IFNAME"),
        ({"netns": ""}, 4, "CNI_NETNS"),
        ({"netns": "relative/ns"}, 4, "CNI_NETNS"),
        ({"cni_args": "novalue"}, 4, "CNI_ARGS"),
        ({"config_json": "{not json"}, 6, "JSON"),
        ({"config_json": "[1, 2]"}, 6, "object"),
        ({"config_json": json.dumps({"cniVersion": 1})}, 7, "cniVersion"),
        ({"config_json": json.dumps({"cniVersion": "9.9.9"})}, 1, "9.9.9"),
    ],
)
def test_bad_fields(override: dict[str, str], code: int, named: str) -> None:
    with pytest.raises(CniError) as info:
        parse("ADD", **fields(**override))
    assert info.value.code == code
    assert named in str(info.value)


def test_oversized_config_is_a_decode_error() -> None:
    huge = json.dumps({"cniVersion": "1.0.0", "pad": "x" * (1 << 20)})
    with pytest.raises(CniError) as info:
        parse("ADD", **fields(config_json=huge))
    assert info.value.code == 6


# --- property: any request decodes to a CniRequest or a CniError with a spec code (issue 15) ---
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12,
)
_configs = st.one_of(
    st.text(max_size=50),
    _json_values.map(json.dumps),
    st.fixed_dictionaries({"cniVersion": st.sampled_from(["0.4.0", "1.1.0"]) | _json_values},
                          optional={"prevResult": _json_values, "runtimeConfig": _json_values,
                                    "cni.dev/valid-attachments": _json_values}).map(json.dumps),
    st.integers(1, 100_000).map(lambda n: "[" * n + "]" * n),
)


@settings(max_examples=300, deadline=None)
@given(verb=st.sampled_from(["ADD", "DEL", "CHECK"]), config_json=_configs,
       container_id=st.text(max_size=20) | st.just("a" * 300), ifname=st.text(max_size=20),
       netns=st.text(max_size=20), cni_args=st.text(max_size=20))
def test_any_request_is_a_request_or_a_cni_error(verb: str, config_json: str, container_id: str,
                                                 ifname: str, netns: str, cni_args: str) -> None:
    try:
        req = parse(verb, version="", container_id=container_id, netns=netns, ifname=ifname,
                    config_json=config_json, cni_args=cni_args)
    except CniError as exc:
        assert exc.code in (1, 2, 4, 6, 7), exc
        return
    assert req.key.container_id == container_id and isinstance(req.config, dict)
    if "cni.dev/valid-attachments" in req.config:  # what GC reads from the same config
        try:
            valid_attachments(req.config)
        except CniError as exc:
            assert exc.code == 7

"""Request validation: every identity field by the CNI spec's rules, with the spec's codes.

Plan: a good request parses (CNI_ARGS split, pod UID taken from the field or K8S_POD_UID);
each bad container ID, ifname, netns, config and CNI_ARGS gives its code and names the field.
"""

from __future__ import annotations

import json

import pytest

from agent.errors import CniError
from agent.request import parse

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

"""Request validation: every identity field by the CNI spec's rules, with the spec's codes.

Plan: a good request parses (CNI_ARGS split, pod UID taken from the field or K8S_POD_UID);
each bad container ID, ifname, netns, config and CNI_ARGS gives its code and names the field.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.api.grpc_server import valid_attachments
from agent.model.errors import CniError
from agent.model.pod import parse

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


# --- issue 23, defect 6: the pod's identity from CNI_ARGS has Kubernetes' limits ----------------
@pytest.mark.parametrize(
    ("cni_args", "named"),
    [
        ("K8S_POD_NAME=" + "p" * 120_000, "K8S_POD_NAME"),
        ("K8S_POD_NAME=" + "p" * 254, "K8S_POD_NAME"),
        ("K8S_POD_NAMESPACE=" + "n" * 64, "K8S_POD_NAMESPACE"),
        ("K8S_POD_UID=" + "u" * 129, "K8S_POD_UID"),
        ("K8S_POD_NAME=a/b", "K8S_POD_NAME"),
        ("K8S_POD_NAME=web\n2024-01-01 INFO forged log line", "K8S_POD_NAME"),
        ("K8S_POD_NAMESPACE=kube system", "K8S_POD_NAMESPACE"),
        ("K8S_POD_NAMESPACE=-lead", "K8S_POD_NAMESPACE"),
        ("K8S_POD_UID=\x1b[31mred", "K8S_POD_UID"),
    ],
)
@pytest.mark.parametrize("verb", ["ADD", "CHECK"])
def test_pod_identity_args_beyond_kubernetes_limits_are_refused(
        verb: str, cni_args: str, named: str) -> None:
    with pytest.raises(CniError) as info:
        parse(verb, **fields(cni_args=cni_args))
    assert info.value.code == 4
    assert named in info.value.msg
    assert len(str(info.value)) < 400  # the value is never echoed whole


def test_the_pod_uid_field_is_judged_like_k8s_pod_uid() -> None:
    with pytest.raises(CniError) as info:
        parse("ADD", **fields(), pod_uid="u" * 200)
    assert info.value.code == 4 and "K8S_POD_UID" in info.value.msg


@pytest.mark.parametrize("cni_args", [
    "K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-5d78c9869d-x2x7q;"
    "K8S_POD_UID=3f1c2a8e-1d0b-4c1e-9b51-7e4a0f6a2c10",
    "K8S_POD_NAME=" + "a" * 253 + ";K8S_POD_NAMESPACE=" + "b" * 63,
    "K8S_POD_NAME=My_Container.1",  # podman sends its container name, which may have these
    "K8S_POD_NAME=;K8S_POD_NAMESPACE=",  # empty: absent
    "IgnoreUnknown=1;K8S_POD_INFRA_CONTAINER_ID=" + "x" * 1000,  # not ours to judge
])
def test_real_pod_identities_pass(cni_args: str) -> None:
    parse("ADD", **fields(cni_args=cni_args))


def test_del_ignores_a_bad_pod_identity() -> None:
    # DEL is best effort and needs only the container ID and ifname: an attachment an older
    # agent accepted with such a name must still be deletable
    req = parse("DEL", **fields(cni_args="K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + "p" * 300))
    assert req.pod_name == "" and req.pod_namespace == "default"

"""Agent configuration: Contiv's keys and defaults, ours, and refusals that name the key.

Plan: defaults with an empty file; Contiv keys in PascalCase and camelCase; our keys; each bad
value refused with key, value and reason; unknown keys refused; unimplemented Contiv keys warned
about by name; the IPAM section's errors surface as IPAMConfig.<key>.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import AgentConfig, ConfigError, load, parse


def test_empty_config_gives_contiv_defaults() -> None:
    cfg = parse({}, env={"NODE_NAME": "worker-1"})
    assert cfg.node_name == "worker-1"
    assert cfg.mtu == 1450
    assert cfg.use_tap_interfaces is True
    assert (cfg.tapv2_rx_ring_size, cfg.tapv2_tx_ring_size) == (256, 256)
    assert (cfg.main_vrf_id, cfg.pod_vrf_id) == (0, 1)
    assert cfg.cni_socket == "/run/vswitch-cni/cni.sock"
    assert cfg.http_host_port == ("0.0.0.0", 9999)
    assert cfg.dataplane == "kernel"
    assert cfg.warnings == ()


def test_contiv_keys_in_either_case() -> None:
    pascal = parse({"UseTAPInterfaces": False, "MTUSize": 9000, "PodVRFID": 7}, env={})
    camel = parse({"useTAPInterfaces": False, "mtuSize": 9000, "podVRFID": 7}, env={})
    for cfg in (pascal, camel):
        assert (cfg.use_tap_interfaces, cfg.mtu, cfg.pod_vrf_id) == (False, 9000, 7)


def test_our_keys() -> None:
    cfg = parse(
        {
            "NodeName": "n1",
            "EtcdEndpoints": "http://10.0.0.1:2379,http://10.0.0.2:2379",
            "EtcdPrefix": "/mine",
            "CNISocket": "/tmp/x.sock",
            "HTTPAddress": ":8080",
            "Dataplane": "vpp",
        },
        env={},
    )
    assert cfg.etcd_endpoints == ("http://10.0.0.1:2379", "http://10.0.0.2:2379")
    assert cfg.etcd_prefix == "/mine/"
    assert cfg.http_host_port == ("0.0.0.0", 8080)
    assert cfg.dataplane == "vpp"


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("MTUSize", 100, "between 576 and 9216"),
        ("MTUSize", "1500", "integer"),
        ("UseTAPInterfaces", "yes", "true or false"),
        ("TAPv2RxRingSize", 300, "power of two"),
        ("TAPInterfaceVersion", 1, "version 2"),
        ("Dataplane", "ovs", "'kernel' or 'vpp'"),
        ("CNISocket", "relative.sock", "absolute"),
        ("HTTPAddress", "localhost", "HOST:PORT"),
        ("EtcdEndpoints", ["10.0.0.1:2379"], "etcd URL"),
        ("EtcdTimeout", 0, "seconds"),
        ("GatewayInterface", "a-very-long-interface-name", "15 bytes"),
        ("Workers", 0, "between 1 and 256"),
    ],
)
def test_bad_values_name_key_value_and_reason(key: str, value: object, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse({key: value}, env={})
    assert info.value.key == key
    assert info.value.value == value
    assert reason in str(info.value)


def test_unknown_key_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"'MTUSzie'.*unknown key"):
        parse({"MTUSzie": 1500}, env={})


def test_unimplemented_contiv_key_is_warned_by_name() -> None:
    cfg = parse({"UseSRv6ForServices": True, "StealFirstNIC": False}, env={})
    assert any("UseSRv6ForServices" in w for w in cfg.warnings)
    assert any("StealFirstNIC" in w for w in cfg.warnings)


def test_nat_and_afpacket_keys() -> None:
    cfg = parse({"NatExternalTraffic": False, "NatExcludedCIDRs": ["10.20.0.0/16", "fd00::/8"],
                 "AfPacketVersion": 3, "AfPacketRxFrames": 64}, env={})
    assert (cfg.nat_external_traffic, cfg.nat_excluded_cidrs) == (
        False, ("10.20.0.0/16", "fd00::/8"))
    assert (cfg.afpacket_version, cfg.afpacket_rx_frames, cfg.afpacket_tx_frames) == (3, 64, 32)
    assert parse({}, env={}).nat_external_traffic is True  # Contiv's default
    for key, value in (("AfPacketVersion", 1), ("AfPacketFrameSize", 2050),
                       ("NatExcludedCIDRs", ["10.0.0.0/33"]), ("AfPacketTxFrames", 0)):
        with pytest.raises(ConfigError) as info:
            parse({key: value}, env={})
        assert info.value.key == key


def test_ipam_section_errors_name_the_nested_key() -> None:
    with pytest.raises(ConfigError) as info:
        parse({"IPAMConfig": {"PodSubnetCIDR": "10.1.0.0/33"}}, env={})
    assert info.value.key.startswith("IPAMConfig.")
    assert "PodSubnetCIDR" in info.value.key


def test_ipam_section_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match="IPAMConfig"):
        parse({"IPAMConfig": ["10.1.0.0/16"]}, env={})


def test_top_level_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError):
        parse(["a"], env={})


def test_load_reads_yaml_and_reports_unreadable_files(tmp_path: Path) -> None:
    path = tmp_path / "contiv.yaml"
    path.write_text("NodeName: n2\nIPAMConfig:\n  PodSubnetCIDR: 10.5.0.0/16\n")
    cfg = load(path, env={})
    assert isinstance(cfg, AgentConfig)
    assert cfg.node_name == "n2"
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "missing.yaml")
    path.write_text("NodeName: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load(path)

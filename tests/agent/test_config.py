"""Agent configuration: Contiv's keys and defaults, ours, and refusals that name the key.

Plan: defaults with an empty file; Contiv keys in PascalCase and camelCase; our keys; each bad
value refused with key, value and reason; unknown keys refused; unimplemented Contiv keys warned
about by name; the IPAM section's errors surface as IPAMConfig.<key>.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.app.config import AgentConfig, ConfigError, load, parse
from agent.app.preflight import preflight
from agent.app.wiring import vpp_config
from agent.dataplane.vpp.config import VppConfig
from agent.model.errors import InvalidConfig
from ipam import node_networks


def test_empty_config_gives_contiv_defaults() -> None:
    cfg = parse({}, env={"NODE_NAME": "worker-1"})
    assert cfg.node_name == "worker-1"
    assert cfg.mtu == 1450
    assert cfg.use_tap_interfaces is True
    assert (cfg.tapv2_rx_ring_size, cfg.tapv2_tx_ring_size) == (256, 256)
    assert (cfg.main_vrf_id, cfg.pod_vrf_id) == (0, 1)
    assert cfg.cni_socket == "/run/vswitch-cni/cni.sock"
    # loopback: REST has no authentication (issue #23)
    assert cfg.rest_binds == [("127.0.0.1", 9999)]
    assert (cfg.http_workers, cfg.http_max_connections, cfg.http_header_timeout) == (4, 64, 5.0)
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
    assert cfg.http_host_port == ("0.0.0.0", 8080)  # an empty host: every address (Go's way)
    assert cfg.rest_binds == [("0.0.0.0", 8080)]
    assert any("every address" in w for w in cfg.warnings)
    assert cfg.dataplane == "vpp"


def test_rest_on_the_nodes_own_address() -> None:
    """`node:PORT`: loopback (local tools) and the node IP (kubelet probes, a node's Prometheus,
    vswitchctl from another node), from NodeIP, else NODE_IP; nothing else of the node."""
    from_env = parse({"HTTPAddress": "node:9999"}, env={"NODE_IP": "192.168.16.3"})
    assert from_env.rest_binds == [("127.0.0.1", 9999), ("192.168.16.3", 9999)]
    assert from_env.http_host_port[1] == 9999 and from_env.warnings == ()
    configured = parse({"HTTPAddress": "node:9999", "NodeIP": "fd00::3/64"},
                       env={"NODE_IP": "192.168.16.3"})
    assert configured.rest_binds == [("::1", 9999), ("fd00::3", 9999)]
    with pytest.raises(ConfigError, match="set NodeIP, or NODE_IP") as info:
        parse({"HTTPAddress": "node:9999"}, env={})
    assert info.value.key == "HTTPAddress"
    with pytest.raises(ConfigError, match="not an IP address"):
        parse({"HTTPAddress": "node:9999"}, env={"NODE_IP": "worker-3"})


def test_rest_limit_keys() -> None:
    cfg = parse({"HTTPWorkers": 2, "HTTPMaxConnections": 16, "HTTPHeaderTimeout": 0.5}, env={})
    assert (cfg.http_workers, cfg.http_max_connections, cfg.http_header_timeout) == (2, 16, 0.5)


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
        ("HTTPMaxConnections", 0, "between 1 and 4096"),
        ("HTTPWorkers", 65, "between 1 and 64"),
        ("HTTPHeaderTimeout", 0, "seconds"),
        ("EtcdEndpoints", ["10.0.0.1:2379"], "etcd URL"),
        ("EtcdTimeout", 0, "seconds"),
        ("GatewayInterface", "a-very-long-interface-name", "15 bytes"),
        ("Workers", 0, "between 1 and 256"),
        # issue 15, defects 9 and 11
        ("TAPv2RxRingSize", 0, "between 1 and 32768"),
        ("TAPv2TxRingSize", 0, "between 1 and 32768"),
        ("EtcdEndpoints", "ftp://10.0.0.1:2379", "http:// or https://"),
        ("EtcdEndpoints", "http://10.0.0.1:port", "number from 1 to 65535"),
        ("EtcdEndpoints", "http://:2379", "http://HOST:PORT"),
        ("CNISocket", "/" + "s" * 107, "at most 107 bytes"),
        ("GatewayInterface", "vs gw", "no '/', ':' or space"),
        ("GatewayInterface", "lo", "loopback"),
        ("VPPHostInterface", "lo", "loopback"),
        ("NodeIP", "1.2.3", "IP address"),
        ("NodeIP", "node-1", "IP address"),
        # issue 23, defect 5: urlsplit's ValueError escaped (a traceback at start)
        ("EtcdEndpoints", "http://[::1", "not a URL"),
        # issue 23, defect 6: a node IP no other node can reach was published
        ("NodeIP", "127.0.0.1", "loopback"),
        ("NodeIP", "::1", "loopback"),
        ("NodeIP", "0.0.0.0", "unspecified"),
        ("NodeIP", "224.0.0.5/24", "multicast"),
        ("NodeIP", "169.254.10.1", "link-local"),
        ("NodeIP", "fe80::1/64", "link-local"),
        ("NodeIP", "240.0.0.1", "reserved"),
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
    assert (cfg.afpacket_version, cfg.afpacket_rx_frames, cfg.afpacket_tx_frames) == (3, 64, 16)
    assert parse({}, env={}).nat_external_traffic is True  # Contiv's default
    host = parse({"AfPacketHostRxFrames": 128, "AfPacketHostTxFrames": 32}, env={})
    assert (host.afpacket_host_rx_frames, host.afpacket_host_tx_frames) == (128, 32)
    assert (cfg.afpacket_host_rx_frames, cfg.afpacket_host_tx_frames) == (16, 64)
    for key, value in (("AfPacketVersion", 1), ("AfPacketFrameSize", 2050),
                       ("NatExcludedCIDRs", ["10.0.0.0/33"]), ("AfPacketTxFrames", 0),
                       ("AfPacketHostRxFrames", 1), ("AfPacketHostTxFrames", 5000)):
        with pytest.raises(ConfigError) as info:
            parse({key: value}, env={})
        assert info.value.key == key


def test_vpp_pod_pool_key_and_its_default() -> None:
    unset = parse({"Dataplane": "vpp", "UseTAPInterfaces": False}, env={})
    assert unset.vpp_pod_pool is None and not unset.expedite_kernel_rcu
    networks = node_networks(unset.ipam, 1)
    assert vpp_config(unset, networks).pod_pool == 4  # whatever the kernel's grace periods
    for given in (0, 7):
        cfg = parse({"Dataplane": "vpp", "vpppodpool": given}, env={})
        assert vpp_config(cfg, networks).pod_pool == given
    for value in (-1, 65, "many"):
        with pytest.raises(ConfigError) as info:
            parse({"VppPodPool": value}, env={})
        assert info.value.key == "VppPodPool"
    assert parse({"ExpediteKernelRcu": True}, env={}).expedite_kernel_rcu
    with pytest.raises(ConfigError) as info:
        parse({"ExpediteKernelRcu": "sometimes"}, env={})
    assert info.value.key == "ExpediteKernelRcu"


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


# --- issue 15: hostile config files (defects 8, 9, 11) -------------------------------------------
def test_node_ip_accepts_addresses_with_or_without_prefix() -> None:
    assert parse({"NodeIP": "192.168.16.3"}, env={}).node_ip == "192.168.16.3"
    assert parse({"NodeIP": "fd00::3/64"}, env={}).node_ip == "fd00::3/64"


def bomb(levels: int) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_yaml_alias_bomb_is_refused_and_never_rendered(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb(6))  # 9^6 strings once expanded into an error message
    with pytest.raises(ConfigError) as info:
        load(path, env={})
    assert "anchors and aliases" in str(info.value)
    assert len(str(info.value)) < 500


def test_error_messages_never_render_a_whole_value() -> None:
    with pytest.raises(ConfigError) as info:
        parse({"Unknown": [list(range(1000))] * 1000}, env={})
    assert "a list of 1000 items" in str(info.value)
    with pytest.raises(ConfigError) as info:
        parse({"NodeName": "x" * 100_000, "MTUSize": "y" * 100_000}, env={})
    assert len(str(info.value)) < 300


@pytest.mark.parametrize("text,key", [
    ("MTUSize: 1400\nmtusize: 1500\n", "mtusize"),
    ("MTUSize: 1400\nMTUSize: 1500\n", "MTUSize"),
    ("IPAMConfig:\n  PodSubnetCIDR: 10.1.0.0/16\n  podSubnetCIDR: 10.2.0.0/16\n",
     "podSubnetCIDR"),
])
def test_keys_given_twice_are_refused(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="given twice") as info:
        load(path, env={})
    assert info.value.key == key


def test_keys_given_twice_in_a_decoded_document() -> None:
    with pytest.raises(ConfigError, match="given twice"):
        parse({"MTUSize": 1400, "mtusize": 1500}, env={})
    with pytest.raises(ConfigError, match="given twice") as info:
        parse({"IPAMConfig": {"PodSubnetCIDR": "10.1.0.0/16", "podsubnetcidr": "10.2.0.0/16"}},
              env={})
    assert info.value.key == "IPAMConfig.podsubnetcidr"


def test_config_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("NodeName: n\xe4me\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8") as info:
        load(path, env={})
    assert info.value.key == "--config"


def test_deeply_nested_yaml_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("NodeName: " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load(path, env={})


@pytest.mark.parametrize("key,value,reason", [
    ("HTTPAddress", "no-such-host.invalid:9999", "cannot be resolved"),
    ("StateDir", "{file}/state", "is not a directory"),
    ("CNISocket", "{file}/run/cni.sock", "is not a directory"),
])
def test_preflight_refuses_what_cannot_work_on_this_machine(
        tmp_path: Path, key: str, value: str, reason: str) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    cfg = parse({key: value.format(file=blocker)}, env={})
    with pytest.raises(ConfigError, match=reason) as info:
        preflight(cfg)
    assert info.value.key == key


def test_preflight_accepts_creatable_directories(tmp_path: Path) -> None:
    cfg = parse({"StateDir": str(tmp_path / "a" / "b"), "HTTPAddress": "localhost:9999",
                 "CNISocket": str(tmp_path / "run" / "cni.sock")}, env={})
    preflight(cfg)
    assert not (tmp_path / "a").exists()  # checked, not created


def test_mesh_keys() -> None:
    cfg = parse({"NodeName": "n", "UseL2Interconnect": True, "VXLANVNI": 4096,
                 "VXLANInterface": "vx0"})
    assert (cfg.use_l2_interconnect, cfg.vxlan_vni, cfg.vxlan_interface) == (True, 4096, "vx0")
    assert cfg.warnings == ()  # UseL2Interconnect is implemented now, no longer warned about
    defaults = parse({"NodeName": "n"})
    assert (defaults.use_l2_interconnect, defaults.vxlan_vni) == (False, 10)
    with pytest.raises(ConfigError, match="'VXLANVNI' = 16777216"):
        parse({"VXLANVNI": 2**24})
    with pytest.raises(ConfigError, match="'VXLANInterface'"):
        parse({"VXLANInterface": "a-name-far-too-long"})


def test_vxlan_owner_decides_where_the_vpp_mesh_is_encapsulated() -> None:
    vpp = {"NodeName": "n", "Dataplane": "vpp"}
    assert parse(vpp).vxlan_owner == "linux" and not parse(vpp).vxlan_in_vpp
    assert parse({**vpp, "VXLANOwner": "vpp"}).vxlan_in_vpp
    # the key only picks between VPP's tunnels and Linux's device: no tunnels in VPP otherwise
    assert not parse({**vpp, "VXLANOwner": "vpp", "UseL2Interconnect": True}).vxlan_in_vpp
    assert not parse({"NodeName": "n", "VXLANOwner": "vpp"}).vxlan_in_vpp  # kernel dataplane
    with pytest.raises(ConfigError, match=r"'VXLANOwner' = 'ovs'.*'linux' or 'vpp'"):
        parse({"VXLANOwner": "ovs"})


def test_the_interconnect_gets_rings_of_its_own() -> None:
    cfg = parse({"Dataplane": "vpp", "AfPacketRxFrames": 16, "AfPacketTxFrames": 14,
                 "AfPacketHostRxFrames": 128}, env={})
    vpp = vpp_config(cfg, node_networks(cfg.ipam, 1))
    assert (vpp.afpacket.rx_frames, vpp.afpacket.tx_frames) == (16, 14)
    assert (vpp.host_afpacket.rx_frames, vpp.host_afpacket.tx_frames) == (128, 64)
    # the agent's defaults are the driver's own
    defaults = vpp_config(parse({}, env={}), node_networks(cfg.ipam, 1))
    driver = VppConfig(pod_gateways=defaults.pod_gateways)
    assert (defaults.afpacket, defaults.host_afpacket) == (driver.afpacket, driver.host_afpacket)
    assert vpp.host_afpacket.frame_size == vpp.afpacket.frame_size
    # a ring the kernel refuses (3 x 67584 bytes is not page-aligned) names its key
    odd = parse({"Dataplane": "vpp", "AfPacketHostTxFrames": 3}, env={})
    with pytest.raises(InvalidConfig, match="AfPacketHostTxFrames=3"):
        vpp_config(odd, node_networks(odd.ipam, 1))


def test_service_translation_needs_vpp_and_table_0() -> None:
    vpp = {"NodeName": "n", "Dataplane": "vpp"}
    assert parse(vpp).service_translation == "kube-proxy"
    assert parse({**vpp, "ServiceTranslation": "vpp"}).service_translation == "vpp"
    assert parse({**vpp, "ServiceTranslation": "vpp", "VXLANOwner": "vpp",
                  "UseL2Interconnect": True}).service_translation == "vpp"
    with pytest.raises(ConfigError, match=r"'ServiceTranslation' = 'ipvs'.*'kube-proxy' or"):
        parse({**vpp, "ServiceTranslation": "ipvs"})
    with pytest.raises(ConfigError, match=r"'ServiceTranslation' = 'vpp'.*Dataplane: vpp"):
        parse({"NodeName": "n", "ServiceTranslation": "vpp"})
    with pytest.raises(ConfigError, match=r"'ServiceTranslation' = 'vpp'.*MainVRFID: 0"):
        parse({**vpp, "ServiceTranslation": "vpp", "MainVRFID": 2})
    # VPP's own mesh: cnat on its BVI or wireguard interface (agent/app/cluster_side)
    assert parse({**vpp, "ServiceTranslation": "vpp", "VXLANOwner": "vpp"}
                 ).service_translation == "vpp"


def test_encryption_keys_defaults_and_refusals() -> None:
    off = parse({"NodeName": "n"}, env={})
    assert (off.encryption, off.mtu, off.wireguard_port) == ("off", 1450, 51820)
    assert parse({"NodeName": "n", "Encryption": False}, env={}).encryption == "off"  # YAML off
    on = parse({"NodeName": "n", "Encryption": "wireguard"}, env={})
    assert (on.encryption, on.mtu, on.wireguard_interface) == ("wireguard", 1420, "vswitch-wg")
    given = parse({"NodeName": "n", "Encryption": "wireguard", "MTUSize": 1400,
                   "WireGuardPort": 51000, "WireGuardImplementation": "wireguard-go"}, env={})
    assert (given.mtu, given.wireguard_port, given.wireguard_implementation) == (
        1400, 51000, "wireguard-go")
    with pytest.raises(ConfigError, match=r"'Encryption' = 'ipsec'.*'off', 'wireguard' or"):
        parse({"NodeName": "n", "Encryption": "ipsec"}, env={})
    vpp = parse({"NodeName": "n", "Dataplane": "vpp", "Encryption": "wireguard"}, env={})
    assert (vpp.encryption, vpp.vxlan_owner, vpp.mtu) == ("wireguard", "linux", 1420)
    own = parse({"NodeName": "n", "Dataplane": "vpp", "VXLANOwner": "vpp",
                 "Encryption": "wireguard"}, env={})  # VPP's own wireguard plugin
    assert (own.encryption, own.vxlan_in_vpp, own.mtu) == ("wireguard", True, 1420)
    # no GSO from pods then: rings of 512 packet-sized frames, unless set
    assert (own.afpacket_frame_size, own.afpacket_rx_frames, own.afpacket_tx_frames,
            own.afpacket_host_rx_frames, own.afpacket_host_tx_frames) == (2048, 512, 512, 512, 512)
    jumbo = parse({"NodeName": "n", "Dataplane": "vpp", "VXLANOwner": "vpp", "MTUSize": 8900,
                   "Encryption": "wireguard", "AfPacketRxFrames": 64}, env={})
    assert (jumbo.afpacket_frame_size, jumbo.afpacket_rx_frames) == (9120, 64)  # 8900+80+128
    assert (vpp.afpacket_frame_size, vpp.afpacket_rx_frames) == (67584, 14)  # GSO frames
    rollout = parse({"NodeName": "n", "Dataplane": "vpp", "VXLANOwner": "vpp",
                     "Encryption": "wireguard-permissive"}, env={})
    assert (rollout.encryption, rollout.afpacket_rx_frames) == ("wireguard-permissive", 512)
    with pytest.raises(ConfigError, match=r"'WireGuardImplementation' = 'boringtun'"):
        parse({"NodeName": "n", "WireGuardImplementation": "boringtun"}, env={})
    with pytest.raises(ConfigError, match=r"'WireGuardPort' = 0"):
        parse({"NodeName": "n", "WireGuardPort": 0}, env={})

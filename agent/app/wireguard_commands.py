"""The operator's WireGuard commands, run on the node beside its agent (docs/encryption.md):

    vswitch-agent --config FILE wireguard rotate [--wait SECONDS]   a new key for this node
    vswitch-agent --config FILE wireguard show                      this node's key and peers
                                                                    (the device's, or VPP's)

`rotate` writes a new private key into the node's key file (StateDir/wireguard.key, mode 0600);
the running agent notices the new file within its next tick (2 s), puts the key on the device and
publishes the new public key, and every other node replaces its peer. The command waits until the
registry shows the new key. The key never leaves the node: the command runs where the file is.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from agent.app.config import AgentConfig
from agent.linux.wireguard import Device, KeyFile
from agent.model.errors import CniError
from agent.model.node import fingerprint
from agent.state.registry import Registry
from agent.state.store import Store


def key_file(config: AgentConfig) -> KeyFile:
    return KeyFile(Path(config.state_dir) / "wireguard.key")


def wireguard_command(config: AgentConfig, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="vswitch-agent --config FILE wireguard")
    sub = parser.add_subparsers(dest="action", required=True)
    rotate = sub.add_parser("rotate", help="make a new key for this node")
    rotate.add_argument("--wait", type=float, default=30.0, metavar="SECONDS",
                        help="how long to wait for the agent to publish it (default 30)")
    sub.add_parser("show", help="this node's key and its peers")
    args = parser.parse_args(argv)
    if config.encryption == "off":
        print("error: this node's config has Encryption: off", file=sys.stderr)
        return 2
    key = key_file(config)
    try:
        if args.action == "show":
            return _show(config, key)
        return _rotate(config, key, args.wait)
    except CniError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3


def _show(config: AgentConfig, key: KeyFile) -> int:
    if config.vxlan_in_vpp:
        return _show_vpp(config, key)
    device = Device(config.wireguard_interface, config.wireguard_port, key)
    status = device.status()
    names = _registry_keys(config)
    print(f"interface {device.ifname}: port {status.listen_port}, "
          f"key {fingerprint(status.public_key)}")
    now = time.time()
    for peer in status.peers:
        seen = (f"{now - peer.latest_handshake:.0f}s ago" if peer.latest_handshake
                else "never")
        print(f"peer {names.get(peer.public_key, '?')}\t{fingerprint(peer.public_key)}\t"
              f"{peer.endpoint}\thandshake {seen}\trx {peer.rx_bytes}\ttx {peer.tx_bytes}")
    return 0


def _show_vpp(config: AgentConfig, key: KeyFile) -> int:
    """VPP's own WireGuard (VXLANOwner: vpp), read through VPP's API socket: per peer only
    whether a session is established (VPP keeps no handshake time or bytes per peer)."""
    from agent.dataplane.vpp.api import VppApi  # only VPP nodes load vpp-papi
    from agent.dataplane.vpp.wireguard import VppWireGuard

    api = VppApi(config.vpp_api_socket, config.vpp_api_dir or None, 2.0, 5.0,
                 "vswitch-agent-wireguard")
    try:
        peers = VppWireGuard(api, key, config.wireguard_port, config.pod_vrf_id,
                             config.main_vrf_id).peers()
    finally:
        api.close()
    names = _registry_keys(config)
    print(f"VPP wireguard interface: port {config.wireguard_port}, "
          f"key {fingerprint(key.public())}")
    for peer in peers.values():
        state = "established" if peer.established else "no session"
        print(f"peer {names.get(peer.public_key, '?')}\t{fingerprint(peer.public_key)}\t"
              f"{peer.endpoint}:{peer.port}\t{state}")
    return 0


def _rotate(config: AgentConfig, key: KeyFile, wait: float) -> int:
    old = key.public() if key.path.exists() else ""
    new = key.rotate()
    print(f"new key for {config.node_name}: {fingerprint(old) or '(none)'} -> "
          f"{fingerprint(new)}")
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if _registry_keys(config).get(new) == config.node_name:
            print("published: the other nodes take it as they see it")
            return 0
        time.sleep(0.2)
    print(f"not published within {wait:g}s: is this node's agent running? it puts the key on "
          "the device and publishes it when it (re)starts", file=sys.stderr)
    return 1


def _registry(config: AgentConfig) -> Registry:
    return Registry(Store(list(config.etcd_endpoints), config.etcd_prefix, config.etcd_timeout,
                          config.etcd_tls))


def _registry_keys(config: AgentConfig) -> dict[str, str]:
    registry = _registry(config)
    try:
        entries, _ = registry.entries()
    finally:
        registry.close()
    return {i.wg_public_key: i.name for i in entries.values() if i.wg_public_key}

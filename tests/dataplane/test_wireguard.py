"""agent/linux/wireguard: the key file, `wg show dump`'s parsing, and the device through the real
`wg` and wireguard-go in a test namespace.

Test plan: a key file is made with mode 0600, its public key is wg's; rotation replaces it (new
inode: what the agent notices); a file others may read is set back to 0600; a file holding no
key is refused naming it; the dump's device line keeps no private key; the device is made
(wireguard-go here), keyed, takes and removes a peer, keeps its port and key over a second
ensure() without touching them, and deleting it ends wireguard-go; the pod MTU leaves room for
WireGuard's 60 bytes over an IPv4 uplink and 80 over IPv6.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from agent.dataplane.wireguard_mesh import WireGuardMesh
from agent.linux.wireguard import Device, KeyFile, parse_dump
from agent.model.errors import InvalidConfig
from agent.model.node import local_node
from ipam import IPAMConfig, node_networks
from testbed.cluster import end_processes
from testbed.netns import NodeExecutor, named_netns

needs_wg = pytest.mark.skipif(shutil.which("wg") is None or shutil.which("wireguard-go") is None,
                              reason="needs wireguard-tools and wireguard-go (make setup)")


@needs_wg
def test_key_file_lifecycle(tmp_path: Path) -> None:
    key = KeyFile(tmp_path / "state" / "wireguard.key")
    public = key.ensure()
    assert stat.S_IMODE(key.path.stat().st_mode) == 0o600
    private = key.path.read_text().strip()
    assert subprocess.run(["wg", "pubkey"], input=private, capture_output=True, text=True,
                          check=True).stdout.strip() == public
    assert key.ensure() == public  # kept
    stamp = key.stamp()
    rotated = key.rotate()
    assert rotated != public and key.stamp() != stamp
    assert stat.S_IMODE(key.path.stat().st_mode) == 0o600
    os.chmod(key.path, 0o644)
    assert key.public() == rotated and stat.S_IMODE(key.path.stat().st_mode) == 0o600
    key.path.write_text("not a key\n")
    with pytest.raises(InvalidConfig, match=r"wireguard\.key holds no WireGuard key"):
        key.public()
    assert not list(key.path.parent.glob(".wireguard-*"))  # no temporary file left


def test_dump_parsing_drops_the_private_key() -> None:
    dump = ("cHJpdmF0ZQ==\tXbcIPClV/lryzgUfx0kXxq7av4CtNUanlzBkY2MHr0k=\t51820\toff\n"
            "9MGgfGzLE0N6lYmgA+OL1SuyC/Np8/eGeXLbfbp9IW4=\t(none)\t192.168.16.12:51820\t"
            "10.1.2.0/24,192.168.30.2/32\t1795917602\t1480\t2352\t25\n"
            "AcE5wTqXeHwjsgPCtGVVSg55rua2lHa4+GOF+sd1HGs=\t(none)\t(none)\t(none)\t0\t0\t0\toff\n")
    status = parse_dump(dump)
    assert status.public_key == "XbcIPClV/lryzgUfx0kXxq7av4CtNUanlzBkY2MHr0k="
    assert status.listen_port == 51820
    assert "cHJpdmF0ZQ==" not in repr(status)
    first, second = status.peers
    assert first.allowed_ips == ("10.1.2.0/24", "192.168.30.2/32")
    assert (first.latest_handshake, first.rx_bytes, first.tx_bytes) == (1795917602, 1480, 2352)
    assert (second.endpoint, second.allowed_ips, second.latest_handshake) == ("", (), 0)


@needs_wg
def test_device_made_keyed_and_peered(tmp_path: Path) -> None:
    peer_key = KeyFile(tmp_path / "peer.key").ensure()
    with named_netns("twg") as path:
        ns = os.path.basename(path)
        ifname = f"wgt{ns[3:]}"[:15]
        key = KeyFile(tmp_path / "wireguard.key")
        key.ensure()
        device = Device(ifname, 51999, key)
        try:
            with NodeExecutor(path, 1) as pool:
                _exercise(pool, device, peer_key)
        finally:
            end_processes(ns)  # wireguard-go, had the test failed before the delete
        link = subprocess.run(["ip", "-n", ns, "link", "show", ifname], capture_output=True)
        assert link.returncode != 0
        assert not Path(f"/var/run/wireguard/{ifname}.sock").exists()


def _exercise(pool: NodeExecutor, device: Device, peer_key: str) -> None:
    index = pool.submit(device.ensure, 1400).result()
    assert device.running == "wireguard-go"
    status = pool.submit(device.status).result()
    assert (status.listen_port, status.public_key) == (51999, device.key.public())
    pool.submit(device.set_peer, peer_key, "10.99.0.2", 51820,
                ["10.1.2.0/24", "fd00:10:0:2::/64"], True).result()
    peers = pool.submit(device.status).result().peers
    assert [(p.public_key, p.endpoint, set(p.allowed_ips)) for p in peers] == [
        (peer_key, "10.99.0.2:51820", {"10.1.2.0/24", "fd00:10:0:2::/64"})]
    assert pool.submit(device.ensure, 1400).result() == index  # found, kept
    pool.submit(device.remove_peer, peer_key).result()
    assert pool.submit(device.status).result().peers == ()
    assert pool.submit(device.delete).result()


def test_pod_mtu_room_over_an_ipv4_and_an_ipv6_uplink(node_ns: str, tmp_path: Path) -> None:
    """WireGuard costs 60 bytes over an IPv4 uplink and 80 over IPv6: a 1500-byte uplink takes
    pods of 1440 and 1420; one byte more is refused naming the largest that fits."""
    name = os.path.basename(node_ns)
    for argv in (["link", "add", "eth0", "type", "veth", "peer", "name", "eth0p"],
                 ["addr", "add", "192.168.16.1/24", "dev", "eth0"],
                 ["addr", "add", "fd00:16::1/64", "dev", "eth0", "nodad"],
                 ["link", "set", "eth0", "up"]):
        subprocess.run(["ip", "-n", name, *argv], check=True)
    cfg = IPAMConfig.from_mapping({"PodSubnetV6CIDR": "fd00:10::/48"})[0]
    device = Device("wgmtu", 51820, KeyFile(tmp_path / "k"))
    for node_ip, fits in (("192.168.16.1", 1440), ("fd00:16::1", 1420)):
        local = local_node("n1", node_ip, node_networks(cfg, 1))
        WireGuardMesh(fits, device, []).check_mtu(local)
        with pytest.raises(InvalidConfig, match=f"MTUSize {fits + 1} does not fit the uplink "
                           r"eth0 \(MTU 1500\) over WireGuard") as err:
            WireGuardMesh(fits + 1, device, []).check_mtu(local)
        assert f"at most {fits}" in str(err.value.details)

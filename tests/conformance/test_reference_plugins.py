"""The libcni harness proven on the reference plugins (bridge + host-local 1.9.1).

Before the harness judges our plugin it must be shown to judge correctly: with plugins known to
conform it has to report success, real results, real GC, and real CNI error codes.

Test plan:
- VERSION: libcni decodes the bridge's supported versions, 1.1.0 among them.
- ADD, CHECK, STATUS, DEL, repeated DEL at cniVersion 1.0.0 and 1.1.0: the result libcni parsed
  names the pod interface and an IP of the subnet, which the pod namespace really holds; after DEL
  the interface and the IP reservation are gone.
- GC at 1.1.0 through libcni: the cached attachment missing from the valid list gets a DEL (IP
  and interface gone), the valid one still passes CHECK. GC with a single key (the driver's own
  path) reaches the plugins and succeeds (1.9.1's bridge and host-local implement no GC).
- Chaining bridge -> portmap -> tuning with a port mapping passed as a capability arg at 1.0.0 and
  1.1.0: portmap's DNAT rule for the pod IP appears in the host namespace and goes with DEL; tuning
  really sets promisc; CHECK passes.
- Errors: an unsupported cniVersion comes back as CNI code 1; CHECK after the pod interface was
  removed fails with a plugin code, not a crash of the harness.

The driver runs inside a test-owned 'host' namespace, so the bridge never touches the machine;
the bridge, the namespaces and host-local's data dir are removed also when a test fails.
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyroute2 import IPRoute

from testbed.libcni import PORTMAP_CONF, TUNING_CONF, Libcni, is_promisc, nat_rules, unique

ATTACH_VERSIONS = ["1.0.0", "1.1.0"]


def _link_addresses(netns_path: Path, ifname: str) -> list[str] | None:
    """IPv4 CIDRs on ifname inside the namespace, or None when the link does not exist."""
    with IPRoute(netns=str(netns_path), flags=0) as ipr:
        links = ipr.link_lookup(ifname=ifname)
        if not links:
            return None
        return [f"{a.get('IFA_ADDRESS')}/{a['prefixlen']}"
                for a in ipr.get_addr(index=links[0], family=socket.AF_INET)]


class BridgeNet:
    """One bridge + host-local network with its own bridge name, subnet and data dir."""

    def __init__(self, tmp_path: Path, host_netns: Path) -> None:
        self.bridge = unique("vscbr")
        self.name = unique("refnet-")
        self.subnet = ipaddress.ip_network(f"10.250.{secrets.randbelow(256)}.0/24")
        self.data_dir = tmp_path / "host-local"
        self.host_netns = host_netns

    def conflist(self, version: str, *chained: dict[str, Any]) -> dict[str, Any]:
        return {
            "cniVersion": version,
            "name": self.name,
            "plugins": [{
                "type": "bridge", "bridge": self.bridge, "isGateway": True, "ipMasq": False,
                "ipam": {"type": "host-local", "subnet": str(self.subnet),
                         "dataDir": str(self.data_dir)},
            }, *chained],
        }

    def reserved_ips(self) -> set[str]:
        """IPs host-local holds reserved (one file per IP in its data dir)."""
        net_dir = self.data_dir / self.name
        if not net_dir.exists():
            return set()
        return {p.name for p in net_dir.iterdir() if p.name[0].isdigit()}

    def remove_bridge(self) -> None:
        with IPRoute(netns=str(self.host_netns), flags=0) as ipr:
            for index in ipr.link_lookup(ifname=self.bridge):
                ipr.link("del", index=index)


@pytest.fixture
def bridge_net(tmp_path: Path, reference_libcni: Libcni) -> Iterator[BridgeNet]:
    assert reference_libcni.netns_path is not None
    net = BridgeNet(tmp_path, reference_libcni.netns_path)
    try:
        yield net
    finally:
        net.remove_bridge()


def _pod_ip(result: dict[str, Any], netns_path: Path) -> str:
    """The pod's CIDR from an ADD result, checked against the result's own interface list."""
    interfaces = enumerate(result["interfaces"])
    pod_ifaces = [i for i, iface in interfaces if iface.get("sandbox") == str(netns_path)]
    assert len(pod_ifaces) == 1, result
    ips = result["ips"]
    assert len(ips) == 1 and ips[0]["interface"] == pod_ifaces[0], result
    return str(ips[0]["address"])


def test_version_lists_1_1_0(reference_libcni: Libcni) -> None:
    rc, out = reference_libcni.version(plugin="bridge")
    assert rc == 0, out
    assert {"0.3.1", "0.4.0", "1.0.0", "1.1.0"} <= set(out["bridge"]["supportedVersions"])


@pytest.mark.parametrize("version", ATTACH_VERSIONS)
def test_add_check_status_del(
    version: str, reference_libcni: Libcni, bridge_net: BridgeNet,
    netns_factory: Callable[[], Path],
) -> None:
    pod = netns_factory()
    cid = f"ctr-{secrets.token_hex(8)}"
    conflist = bridge_net.conflist(version)

    rc, result = reference_libcni.add(conflist, cid, pod)
    assert rc == 0, result
    assert result["cniVersion"] == version
    cidr = _pod_ip(result, pod)
    assert ipaddress.ip_interface(cidr).ip in bridge_net.subnet
    assert _link_addresses(pod, "eth0") == [cidr]
    assert bridge_net.reserved_ips() == {cidr.split("/")[0]}

    assert reference_libcni.check(conflist, cid, pod) == (0, {})
    assert reference_libcni.status(conflist) == (0, {})

    assert reference_libcni.delete(conflist, cid, pod) == (0, {})
    assert _link_addresses(pod, "eth0") is None
    assert bridge_net.reserved_ips() == set()
    assert reference_libcni.delete(conflist, cid, pod) == (0, {})


def _two_pods(libcni: Libcni, conflist: dict[str, Any],
              netns_factory: Callable[[], Path]) -> dict[str, tuple[Path, str]]:
    """ADD two pods; {container ID: (netns, IP)}."""
    pods = {}
    for _ in range(2):
        cid, pod = f"ctr-{secrets.token_hex(8)}", netns_factory()
        rc, result = libcni.add(conflist, cid, pod)
        assert rc == 0, result
        pods[cid] = (pod, _pod_ip(result, pod).split("/")[0])
    return pods


def test_gc_deletes_stale_cached_attachments(
    reference_libcni: Libcni, bridge_net: BridgeNet, netns_factory: Callable[[], Path],
) -> None:
    conflist = bridge_net.conflist("1.1.0")
    pods = _two_pods(reference_libcni, conflist, netns_factory)
    (keep, (keep_ns, keep_ip)), (_, (drop_ns, _)) = pods.items()

    assert reference_libcni.gc(conflist, [(keep, "eth0")]) == (0, {})
    # libcni's half of GC: the attachment it cached but the runtime no longer lists got a DEL.
    assert bridge_net.reserved_ips() == {keep_ip}
    assert _link_addresses(drop_ns, "eth0") is None
    assert reference_libcni.check(conflist, keep, keep_ns) == (0, {})
    assert reference_libcni.delete(conflist, keep, keep_ns) == (0, {})


@pytest.mark.parametrize("key", ["valid-attachments", "attachments"])
def test_gc_with_one_key_reaches_the_plugins(
    key: str, reference_libcni: Libcni, bridge_net: BridgeNet, netns_factory: Callable[[], Path],
) -> None:
    # The driver's single-key GC skips libcni's cache walk and only sends GC. bridge and
    # host-local 1.9.1 accept GC but implement none (skel answers success), so nothing is freed;
    # what this proves is that the path runs and a plugin's GC answer comes back.
    conflist = bridge_net.conflist("1.1.0")
    pods = _two_pods(reference_libcni, conflist, netns_factory)
    keep = next(iter(pods))

    assert reference_libcni.gc(conflist, [(keep, "eth0")], key=key) == (0, {})
    assert pods[keep][1] in bridge_net.reserved_ips()
    for cid, (pod, _) in pods.items():
        assert reference_libcni.delete(conflist, cid, pod) == (0, {})
    assert bridge_net.reserved_ips() == set()


def test_unsupported_version_is_code_1(
    reference_libcni: Libcni, bridge_net: BridgeNet, netns_factory: Callable[[], Path],
) -> None:
    rc, out = reference_libcni.add(bridge_net.conflist("0.9.9"), "ctr-badversion", netns_factory())
    assert rc == 1
    assert out["code"] == 1, out


def test_check_of_removed_interface_fails_with_a_code(
    reference_libcni: Libcni, bridge_net: BridgeNet, netns_factory: Callable[[], Path],
) -> None:
    pod = netns_factory()
    cid = f"ctr-{secrets.token_hex(8)}"
    conflist = bridge_net.conflist("1.1.0")
    rc, result = reference_libcni.add(conflist, cid, pod)
    assert rc == 0, result
    with IPRoute(netns=str(pod), flags=0) as ipr:
        ipr.link("del", index=ipr.link_lookup(ifname="eth0")[0])

    rc, out = reference_libcni.check(conflist, cid, pod)
    assert rc == 1
    assert out["code"] != 0 and out["msg"], out
    assert reference_libcni.delete(conflist, cid, pod) == (0, {})


@pytest.mark.parametrize("version", ATTACH_VERSIONS)
def test_chained_portmap_and_tuning(
    version: str, reference_libcni: Libcni, bridge_net: BridgeNet,
    netns_factory: Callable[[], Path],
) -> None:
    assert reference_libcni.netns_path is not None
    host, pod = reference_libcni.netns_path, netns_factory()
    cid = f"ctr-{secrets.token_hex(8)}"
    conflist = bridge_net.conflist(version, PORTMAP_CONF, TUNING_CONF)
    mappings = {"portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]}

    rc, result = reference_libcni.add(conflist, cid, pod, capability_args=mappings)
    assert rc == 0, result
    ip = _pod_ip(result, pod).split("/")[0]
    assert any(f"{ip}:80" in rule for rule in nat_rules(host)), nat_rules(host)
    assert is_promisc(pod, "eth0")
    assert reference_libcni.check(conflist, cid, pod, capability_args=mappings) == (0, {})

    assert reference_libcni.delete(conflist, cid, pod, capability_args=mappings) == (0, {})
    assert not any(f"{ip}:" in rule for rule in nat_rules(host))

"""agent/linux/netlink against real namespaces.

Plan: create_veth puts the peer in the pod netns under the asked name with MTU, MAC, alias, both
ends up, for a named netns and a /proc/PID/ns/net path; bad CNI_NETNS values (missing, not a
namespace) and a taken CNI_IFNAME are InvalidEnvironment naming the variable and leave nothing;
delete_link is idempotent; mac_from_key is a stable locally administered unicast MAC; pod_ns never
creates a missing namespace; a namespace the request holds open is read through its fd (the same
identity as by path, and still its own after the path names another namespace), and a held
namespace is never used for another path. The macvlan probe says yes on this kernel and no
where the kernel knows no such kind of link (asked for a kind it lacks: its EOPNOTSUPP), and
leaves no link either way; it removes a pair a killed probe left, and no link of another name.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from agent.dataplane.kernel import mac_from_key
from agent.lifecycle.add_steps import netns_identity, netns_matches
from agent.linux import iproute, netlink, nlcodec
from agent.linux.netns import PodNetns, using
from agent.model.errors import InternalError, InvalidEnvironment
from agent.model.pod import PodKey, PodRecord
from testbed.netns import named_netns, process_netns, run_in, unique


def test_veth_into_named_netns(node_ns: str, pod_netns: str) -> None:
    host = unique("th")
    mac = mac_from_key(PodKey("c1", "eth0"))
    index, host_mac = netlink.create_veth(host, pod_netns, "eth0", 1400, mac, "vswitch-cni:c1:eth0")
    assert index > 0 and len(host_mac) == 17
    with iproute.pod_ns(pod_netns) as ipr:
        link = ipr.link("get", ifname="eth0")[0]
        assert link.get_attr("IFLA_ADDRESS") == mac
        assert link.get_attr("IFLA_MTU") == 1400
        assert link.get_attr("IFLA_OPERSTATE") == "UP"
    assert netlink.links_with_alias_prefix("vswitch-cni:") == {host: "vswitch-cni:c1:eth0"}
    assert netlink.delete_link(host) is True
    assert netlink.delete_link(host) is False
    assert not netlink.link_exists(host)
    assert "eth0" not in run_in(pod_netns, "ip", "link").stdout


def test_veth_into_proc_pid_netns(node_ns: str) -> None:
    with process_netns() as path:
        host = unique("th")
        netlink.create_veth(host, path, "net1", 1500, None, "x")
        assert "net1" in run_in(path, "ip", "link", "show", "net1").stdout
        assert netlink.delete_link(host)


def test_missing_netns_is_invalid_environment_and_not_created(node_ns: str) -> None:
    missing = f"/var/run/netns/{unique('gone')}"
    with pytest.raises(InvalidEnvironment, match=r"CNI_NETNS .* does not exist") as err:
        netlink.create_veth(unique("th"), missing, "eth0", 1500, None, "x")
    assert err.value.code == 4
    with pytest.raises(InvalidEnvironment), iproute.pod_ns(missing):
        pass
    assert not os.path.exists(missing)
    assert netlink.links_with_alias_prefix("") == {}


def test_path_that_is_no_netns(node_ns: str, tmp_path: object) -> None:
    with pytest.raises(InvalidEnvironment, match="not a network namespace"):
        netlink.create_veth(unique("th"), "/etc/hostname", "eth0", 1500, None, "x")
    with pytest.raises(InvalidEnvironment, match="not a network one"):
        netlink.create_veth(unique("th"), "/proc/self/ns/uts", "eth0", 1500, None, "x")


def test_taken_ifname_names_cni_ifname_and_leaves_nothing(node_ns: str, pod_netns: str) -> None:
    first = unique("th")
    netlink.create_veth(first, pod_netns, "eth0", 1500, None, "a")
    second = unique("th")
    with pytest.raises(InvalidEnvironment, match="CNI_IFNAME eth0 already exists"):
        netlink.create_veth(second, pod_netns, "eth0", 1500, None, "b")
    assert not netlink.link_exists(second)
    assert netlink.delete_link(first)


def test_mac_from_key_is_stable_local_unicast() -> None:
    macs = {mac_from_key(PodKey(f"c{i}", "eth0")) for i in range(200)}
    assert len(macs) == 200
    for mac in macs:
        first = int(mac.split(":")[0], 16)
        assert first & 0x01 == 0 and first & 0x02 == 0x02
    key = PodKey("abc", "eth1")
    assert mac_from_key(key) == mac_from_key(PodKey("abc", "eth1"))


@pytest.mark.parametrize("bad", ["", "a-name-longer-than-15", "eth/0", "eth 0", "..", "e:1"])
def test_bad_ifname_names_cni_ifname(node_ns: str, pod_netns: str, bad: str) -> None:
    with pytest.raises(InvalidEnvironment, match="CNI_IFNAME"):
        netlink.create_veth(unique("th"), pod_netns, bad, 1500, None, "x")
    assert netlink.links_with_alias_prefix("") == {}


def test_a_namespace_made_again_at_the_same_path_has_another_cookie() -> None:
    """The kernel reuses a freed namespace's inode number at once, so dev:inode cannot tell a
    recreated sandbox from the old one; the cookie can, every time."""
    with named_netns("tck") as path:
        name = path.rsplit("/", 1)[1]
        first = netns_identity(path)
        assert first.startswith("cookie:")
        old_style = f"{os.stat(path).st_dev}:{os.stat(path).st_ino}"
        record = PodRecord("c1", "eth0", path, [], [], netns_inode=old_style)
        assert netns_matches(record)  # records written before cookies still match
        for _ in range(5):
            subprocess.run(["ip", "netns", "del", name], check=True)
            subprocess.run(["ip", "netns", "add", name], check=True)
            again = netns_identity(path)
            assert again.startswith("cookie:") and again != first
            first = again


def test_a_held_namespace_is_read_through_its_fd() -> None:
    with named_netns("tck") as path, PodNetns.open(path) as held:
        first = netns_identity(path, held)
        assert first == netns_identity(path) and first.startswith("cookie:")
        name = path.rsplit("/", 1)[1]
        subprocess.run(["ip", "netns", "del", name], check=True)
        subprocess.run(["ip", "netns", "add", name], check=True)
        assert netns_identity(path, held) == first != netns_identity(path)
        with pytest.raises(InternalError), using("/var/run/netns/another", held):
            pass


def _links(node_ns: str) -> list[str]:
    return [line.split(":")[1].strip() for line in
            run_in(node_ns, "ip", "-o", "link").stdout.splitlines()]


def test_macvlan_probe_says_yes_here_and_leaves_no_link(node_ns: str) -> None:
    before = _links(node_ns)
    assert netlink.macvlan_supported() is True
    assert _links(node_ns) == before


def test_macvlan_probe_removes_the_pair_a_killed_probe_left(node_ns: str) -> None:
    before = _links(node_ns)
    run_in(node_ns, "ip", "link", "add", "vswmh0123abcd", "type", "veth", "peer", "vswmp0123abcd")
    run_in(node_ns, "ip", "link", "add", "vswmhsomeone", "type", "veth", "peer", "vswmpsomeone")
    assert netlink.macvlan_supported() is True
    left = set(_links(node_ns)) - set(before)
    assert not any(name.startswith("vswmh0123abcd") or name.startswith("vswmp0123abcd")
                   for name in left)
    assert any(name.startswith("vswmhsomeone") for name in left)  # not a probe's name: kept


def test_macvlan_probe_says_no_where_the_kernel_lacks_the_kind(
    node_ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = nlcodec.attr_str

    def lacking(kind: int, value: str) -> bytes:  # the kernel's answer to a kind it lacks
        return real(kind, "vswnokind" if value == "macvlan" else value)

    monkeypatch.setattr(nlcodec, "attr_str", lacking)
    before = _links(node_ns)
    assert netlink.macvlan_supported() is False
    assert _links(node_ns) == before

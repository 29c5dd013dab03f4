"""KernelDataplane + agent/linux/pod_netns on real namespaces, the driver inside a test node
namespace.

Plan: two dual-stack pods reach each other, their gateway and a node address (v4 and v6); check()
of driver and pod side is empty on a good pod and names what broke (route, MTU, neighbor, link);
detach leaves no route at once, and no link once its background delete is done, and is
idempotent; owned() lists exactly our tagged host ends;
start() is idempotent; v4-only, v6-only and /proc/PID/ns/net pods work; pod_netns.remove undoes
configure and is idempotent, also when the namespace is gone.
"""

from __future__ import annotations

import pytest

from agent.dataplane.kernel import KernelDataplane
from agent.linux import pod_netns
from testbed.netns import named_netns, ping, process_netns, run_in, unique
from testbed.pods import Subnets, wire


def test_two_pods_reach_each_other_gateway_and_node(
    node_ns: str, dp: KernelDataplane, subnets: Subnets
) -> None:
    node_v4, node_v6 = "192.0.2.77", "2001:db8::77"  # node addresses, inside node_ns only
    run_in(node_ns, "ip", "addr", "add", f"{node_v4}/32", "dev", "lo")
    run_in(node_ns, "ip", "addr", "add", f"{node_v6}/128", "dev", "lo")
    with named_netns("tpa") as ns_a, named_netns("tpb") as ns_b:
        pod_a, pod_b = subnets.pod(ns_a, 10), subnets.pod(ns_b, 11)
        wa, wb = wire(dp, pod_a), wire(dp, pod_b)
        targets = [str(a.ip) for a in pod_b.addresses] + [str(g) for g in pod_a.gateways]
        for target in [*targets, node_v4, node_v6]:
            assert ping(ns_a, target), f"pod A cannot reach {target}"
        assert ping(ns_b, str(pod_a.addresses[0].ip))
        for pod, wiring in ((pod_a, wa), (pod_b, wb)):
            assert dp.check(pod, wiring) == []
            assert pod_netns.check(pod, wiring.gateway_mac, wiring.pod_mac) == []
        assert set(dp.owned()) == {wa.host_ifname, wb.host_ifname}
        dp.detach(pod_a, wa)
        dp.detach(pod_a, wa)  # idempotent
        dp.detach(pod_b, None)  # without a record: the name is derived from the key
        # at once: no route through either host end, and pod A reaches nothing any more
        routes = run_in(node_ns, "ip", "route").stdout + run_in(node_ns, "ip", "-6", "route").stdout
        assert wa.host_ifname not in routes and wb.host_ifname not in routes
        assert not ping(ns_a, str(pod_a.gateways[0]))
        dp.reaper.drain()  # the background deletes, done: no link left on either side
        assert dp.owned() == {}
        assert "eth0" not in run_in(ns_a, "ip", "link").stdout


def test_check_names_what_broke(node_ns: str, dp: KernelDataplane, subnets: Subnets) -> None:
    with named_netns("tpa") as ns:
        pod = subnets.pod(ns, 20)
        wiring = wire(dp, pod)
        run_in(ns, "ip", "route", "del", "default")
        run_in(ns, "ip", "link", "set", "eth0", "mtu", "1300")
        run_in(ns, "ip", "-6", "neigh", "del", str(pod.gateways[1]), "dev", "eth0")
        problems = pod_netns.check(pod, wiring.gateway_mac, wiring.pod_mac)
        assert any(f"default route via {pod.gateways[0]}" in p for p in problems), problems
        assert any("MTU 1300, expected 1450" in p for p in problems), problems
        assert any(f"neighbor {pod.gateways[1]} missing" in p for p in problems), problems
        run_in(node_ns, "ip", "route", "del", f"{pod.addresses[0].ip}/32")
        assert dp.check(pod, wiring) == [
            f"route {pod.addresses[0].ip}/32 via {wiring.host_ifname} missing"
        ]
        run_in(node_ns, "ip", "link", "set", wiring.host_ifname, "down")
        assert any("not UP" in p for p in dp.check(pod, wiring))
        run_in(ns, "ip", "link", "del", "eth0")
        assert dp.check(pod, wiring) == [f"host interface {wiring.host_ifname} missing"]
        assert pod_netns.check(pod, wiring.gateway_mac, wiring.pod_mac) == [
            f"interface eth0 missing in {ns}"
        ]
    assert pod_netns.check(pod, wiring.gateway_mac, wiring.pod_mac)[0].startswith("netns: ")


@pytest.mark.parametrize(("v4", "v6"), [(True, False), (False, True)])
def test_single_stack_pods(
    node_ns: str, dp: KernelDataplane, subnets: Subnets, v4: bool, v6: bool
) -> None:
    with named_netns("tpa") as ns:
        pod = subnets.pod(ns, 30, v4=v4, v6=v6)
        wiring = wire(dp, pod)
        assert ping(ns, str(pod.gateways[0]))
        assert pod_netns.check(pod, wiring.gateway_mac, wiring.pod_mac) == []
        other = "-6" if v4 else "-4"
        assert "default" not in run_in(ns, "ip", other, "route").stdout


def test_proc_pid_netns_pod(node_ns: str, dp: KernelDataplane, subnets: Subnets) -> None:
    with process_netns() as path:
        pod = subnets.pod(path, 40)
        wiring = wire(dp, pod)
        assert ping(path, str(pod.gateways[0])) and ping(path, str(pod.gateways[1]))
        assert pod_netns.check(pod, wiring.gateway_mac, wiring.pod_mac) == []
        dp.detach(pod, wiring)
        dp.reaper.drain()  # the background delete, done
        assert "eth0" not in run_in(path, "ip", "link").stdout


def test_start_is_idempotent_and_ready(node_ns: str, dp: KernelDataplane) -> None:
    dp.start()
    assert dp.ready()
    addrs = run_in(node_ns, "ip", "addr", "show", dp.gateway_ifname).stdout
    assert all(str(gw) in addrs for gw in dp.gateways)
    for knob in ("/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"):
        with open(knob) as value:
            assert value.read().strip() == "1", knob


def test_podside_remove_is_idempotent(node_ns: str, dp: KernelDataplane, subnets: Subnets) -> None:
    with named_netns("tpa") as ns:
        pod = subnets.pod(ns, 50)
        wire(dp, pod)
        pod_netns.remove(pod)
        pod_netns.remove(pod)
        shown = run_in(ns, "ip", "addr", "show", "eth0").stdout
        assert str(pod.addresses[0].ip) not in shown and "state DOWN" in shown
        assert "default" not in run_in(ns, "ip", "route").stdout
    pod_netns.remove(pod)  # the namespace is gone: still success


def test_forwarding_only_for_the_families_routed(node_ns: str, subnets: Subnets) -> None:
    dp = KernelDataplane(subnets.gateways()[:1], mtu=1500, gateway_ifname=unique("gw"))
    dp.start()
    with (
        open("/proc/sys/net/ipv4/ip_forward") as v4,
        open("/proc/sys/net/ipv6/conf/all/forwarding") as v6,
    ):
        assert (v4.read().strip(), v6.read().strip()) == ("1", "0")

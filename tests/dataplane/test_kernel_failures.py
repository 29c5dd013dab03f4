"""KernelDataplane under failure and load, in a test node namespace.

Plan: a step that fails (pod netns missing, CNI_IFNAME taken in the pod, pod side refusing IPv6,
a bad gateway MAC) raises the right CniError and, once the undo stack is unwound, leaves no link,
route or pod interface behind; a stale host end of the same pod is replaced; bad constructor
values are InvalidConfig naming the field; many pods wired and unwired from parallel threads all
work and leave nothing.
"""

from __future__ import annotations

from contextlib import ExitStack

import pytest

from agent.dataplane.kernel import KernelDataplane
from agent.dataplane.undo import UndoStack
from agent.linux import pod_netns
from agent.model.errors import InternalError, InvalidConfig, InvalidEnvironment, PodSideFailure
from testbed.netns import NodeExecutor, named_netns, ping, run_in, unique
from testbed.pods import Subnets, wire


def node_is_clean(node_ns: str, dp: KernelDataplane) -> None:
    """Only lo and the gateway interface, and only the gateway's connected routes, are left."""
    links = run_in(node_ns, "ip", "-o", "link").stdout.splitlines()
    assert len(links) == 2 and dp.gateway_ifname in links[1], links
    routes = run_in(node_ns, "ip", "route").stdout + run_in(node_ns, "ip", "-6", "route").stdout
    assert all(dp.gateway_ifname in line for line in routes.splitlines()), routes


def test_missing_pod_netns(node_ns: str, dp: KernelDataplane, subnets: Subnets) -> None:
    pod = subnets.pod(f"/var/run/netns/{unique('gone')}", 10)
    undo = UndoStack()
    with pytest.raises(InvalidEnvironment, match="CNI_NETNS") as err:
        dp.attach(pod, undo)
    assert err.value.code == 4 and len(undo) == 0
    node_is_clean(node_ns, dp)


def test_ifname_taken_in_pod(node_ns: str, dp: KernelDataplane, subnets: Subnets) -> None:
    with named_netns("tpa") as ns:
        run_in(ns, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "other0")
        undo = UndoStack()
        with pytest.raises(InvalidEnvironment, match="CNI_IFNAME eth0 already exists"):
            dp.attach(subnets.pod(ns, 11), undo)
        assert len(undo) == 0
        node_is_clean(node_ns, dp)
        assert "other0" in run_in(ns, "ip", "link").stdout  # the pod's own link is untouched


def test_pod_side_failure_unwinds_everything(
    node_ns: str, dp: KernelDataplane, subnets: Subnets
) -> None:
    with named_netns("tpa") as ns:
        run_in(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        run_in(ns, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
        pod = subnets.pod(ns, 12)
        with pytest.raises(PodSideFailure, match=f"adding address {pod.addresses[1]}") as err:
            wire(dp, pod)  # unwinds the undo stack like agent/lifecycle/pods
        assert err.value.code == 102 and err.value.__cause__ is not None
        node_is_clean(node_ns, dp)
        assert "eth0" not in run_in(ns, "ip", "link").stdout


def test_bad_gateway_mac_is_an_internal_error(
    node_ns: str, dp: KernelDataplane, subnets: Subnets
) -> None:
    with named_netns("tpa") as ns:
        pod = subnets.pod(ns, 13, v6=False)
        undo = UndoStack()
        dp.attach(pod, undo)
        with pytest.raises(InternalError, match="gateway_mac"):
            pod_netns.configure(pod, "nonsense")
        assert undo.unwind() == []
        node_is_clean(node_ns, dp)


def test_stale_host_end_is_replaced(node_ns: str, dp: KernelDataplane, subnets: Subnets) -> None:
    with named_netns("tpa") as ns, named_netns("told") as old:
        pod = subnets.pod(ns, 14)
        stale = dp.host_ifname(pod)
        run_in(
            node_ns, "ip", "link", "add", stale, "type", "veth", "peer", "name", "x", "netns", old
        )
        wiring = wire(dp, pod)
        assert wiring.host_ifname == stale
        assert ping(ns, str(pod.gateways[0]))
        assert "x@" not in run_in(old, "ip", "link").stdout


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"gateway_ifname": "a-name-far-too-long"}, "gateway_ifname"),
        ({"host_prefix": "toolong"}, "host_prefix"),
        ({"mtu": 10}, "mtu"),
    ],
)
def test_constructor_refuses_bad_values(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"gateways": [], "mtu": 1500, **kwargs}
    with pytest.raises(InvalidConfig, match=field):
        KernelDataplane(**args)  # type: ignore[arg-type]


def test_parallel_pods(node_ns: str, dp: KernelDataplane, subnets: Subnets) -> None:
    with ExitStack() as stack:
        pods = [subnets.pod(stack.enter_context(named_netns("tpp")), 20 + i) for i in range(12)]
        with NodeExecutor(node_ns, workers=6) as pool:
            wirings = list(pool.map(lambda p: wire(dp, p), pods))
            assert len(dp.owned()) == len(pods)
            problems = pool.map(
                lambda pw: dp.check(*pw) + pod_netns.check(pw[0], pw[1].gateway_mac, pw[1].pod_mac),
                zip(pods, wirings, strict=True),
            )
            assert all(p == [] for p in problems)
            assert ping(pods[0].netns, str(pods[-1].addresses[0].ip))
            assert ping(pods[-1].netns, str(pods[0].addresses[1].ip))
            list(pool.map(lambda pw: dp.detach(*pw), zip(pods, wirings, strict=True)))
        dp.reaper.drain()
        assert dp.owned() == {}
        node_is_clean(node_ns, dp)

"""Pods wired by a dataplane driver in-process, without the agent (tests and the traffic benchmark):
unique subnets, pod networks, a started kernel driver, and a pod network for a VPP node; and
whether a pod's TCP reaches the vswitch unsegmented."""

from __future__ import annotations

import ipaddress
import json
import random
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from agent.dataplane.kernel import KernelDataplane
from agent.dataplane.undo import UndoStack
from agent.linux import ethtool, pod_netns
from agent.model.pod import PodKey, PodNetwork, Wiring
from testbed.netns import run_in, unique


@dataclass(frozen=True)
class Subnets:
    """A node's pod subnets (v4 /24, v6 /64) picked at random per test, plus a node address."""

    v4: ipaddress.IPv4Network
    v6: ipaddress.IPv6Network

    @classmethod
    def pick(cls) -> Subnets:
        a, b = random.randrange(200, 250), random.randrange(256)
        return cls(
            ipaddress.IPv4Network(f"10.{a}.{b}.0/24"),
            ipaddress.IPv6Network(f"fd00:{a:x}:{b:x}::/64"),
        )

    def gateways(self) -> list[ipaddress.IPv4Interface | ipaddress.IPv6Interface]:
        return [
            ipaddress.IPv4Interface(f"{self.v4[1]}/{self.v4.prefixlen}"),
            ipaddress.IPv6Interface(f"{self.v6[1]}/{self.v6.prefixlen}"),
        ]

    def pod(
        self, netns: str, n: int, v4: bool = True, v6: bool = True, mtu: int = 1450
    ) -> PodNetwork:
        addresses: list[ipaddress.IPv4Interface | ipaddress.IPv6Interface] = []
        gateways: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
        if v4:
            addresses.append(ipaddress.IPv4Interface(f"{self.v4[n]}/32"))
            gateways.append(self.v4[1])
        if v6:
            addresses.append(ipaddress.IPv6Interface(f"{self.v6[n]}/128"))
            gateways.append(self.v6[1])
        key = PodKey(f"cid{unique('')}{n}", "eth0")
        return PodNetwork(key, netns, tuple(addresses), tuple(gateways), mtu)


@contextmanager
def started_driver(node_ns: str, subnets: Subnets) -> Iterator[KernelDataplane]:
    """A started driver in `node_ns` (the calling thread must be inside it); lo up there."""
    run_in(node_ns, "ip", "link", "set", "lo", "up")
    dp = KernelDataplane(
        subnets.gateways(), mtu=1450, gateway_ifname=unique("gw"), host_prefix="tv"
    )
    dp.start()
    try:
        yield dp
    finally:
        dp.close()  # the node namespace, and everything in it, goes with the node_ns fixture


def wire(dp: KernelDataplane, pod: PodNetwork) -> Wiring:
    """attach + pod_netns.configure, unwinding on failure, as agent/lifecycle/pods does."""
    undo = UndoStack()
    try:
        wiring = dp.attach(pod, undo)
        undo.push("pod side", lambda: pod_netns.remove(pod))
        pod_netns.configure(pod, wiring.gateway_mac)
        return wiring
    except BaseException:
        undo.unwind()
        raise


IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network  # ip_network()'s type


def vpp_pod(netns: str, address: str, ifname: str = "eth0") -> PodNetwork:
    """A pod network with one address behind the VPP tests' gateway 10.1.1.1."""
    addr = ipaddress.ip_interface(address)
    return PodNetwork(
        key=PodKey(unique("ctr") + "x" * 40, ifname),
        netns=netns,
        addresses=(addr,),
        gateways=(ipaddress.ip_address("10.1.1.1"),),
        mtu=1450,
    )


def dual_stack_pod(netns: str, v4: IPNetwork, v6: IPNetwork, n: int) -> PodNetwork:
    """A pod with host `n` of `v4` and of `v6` (/32 and /128), the subnets' hosts 1 its
    gateways (the real-VPP tests' pods)."""
    p = vpp_pod(netns, f"{v4[n]}/32")
    return PodNetwork(p.key, netns, (*p.addresses, ipaddress.ip_interface(f"{v6[n]}/128")),
                      (v4[1], v6[1]), p.mtu)


def sends_tso(node_netns: str, pod_netns: str, feature: str) -> bool:
    """Whether the pod's TCP reaches the vswitch unsegmented (`feature`: an ethtool TSO
    feature): its eth0's, or for a macvlan (a pod from the VPP agent's pool, whose TSO the kernel
    keeps on) that of its link in the node's namespace, which segments what the macvlan passes
    down. Both namespaces as paths (/var/run/netns/NAME)."""
    def links(netns: str, *which: str) -> list[dict[str, object]]:
        out = subprocess.run(["ip", "-n", netns.rsplit("/", 1)[-1], "-d", "-j", "link", "show",
                              *which], capture_output=True, text=True, check=True).stdout
        found: list[dict[str, object]] = json.loads(out)
        return found
    eth0 = links(pod_netns, "eth0")[0]
    kind = eth0.get("linkinfo", {})
    if not isinstance(kind, dict) or kind.get("info_kind") != "macvlan":
        return ethtool.feature(pod_netns, "eth0", feature)
    lower = next(str(link["ifname"]) for link in links(node_netns)
                 if link["ifindex"] == eth0["link_index"])
    return ethtool.feature(node_netns, lower, feature)

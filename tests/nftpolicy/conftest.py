"""A node of the kernel dataplane with three pods (a, b, c; IPv4 and IPv6) in test namespaces,
and their policies compiled by the real compiler. The test thread is inside the node namespace
for the whole test (the renderer works in its caller's namespace); the namespaces, and with the
node's the table inet vswitch-cni, are always removed, also when a test fails."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from agent.linux.nftpolicy import NftPolicy, PodRules
from policy import PodKey
from policy.model import IPAddress
from testbed.netns import entered, named_netns, run_in
from testbed.pods import Subnets, started_driver, wire
from tests.policy.build import compile_, pod

NS = "t"
NODE = "n1"
PODS = {"a": 5, "b": 6, "c": 7}
WEB = {"name": "web", "containerPort": 8080, "protocol": "TCP"}  # b's named port


@dataclass
class Node:
    path: str
    subnets: Subnets
    netns: dict[str, str]  # pod name -> its namespace
    ips: dict[str, tuple[str, str]]  # pod name -> (IPv4, IPv6)
    extra_node_addresses: tuple[IPAddress, ...] = ()

    def addresses(self, name: str) -> tuple[IPAddress, ...]:
        return tuple(ipaddress.ip_address(a) for a in self.ips[name])

    @property
    def node_addresses(self) -> tuple[IPAddress, ...]:
        return (self.subnets.v4[1], self.subnets.v6[1], *self.extra_node_addresses)

    def desired(self, *policies: dict[str, Any], names: tuple[str, ...] = tuple(PODS),
                labels: dict[str, dict[str, str]] | None = None) -> dict[PodKey, PodRules]:
        """The compiler's rules for the pods `names` under `policies` (dicts, as the API's);
        each pod is labelled app=<its name>, plus what `labels` gives it."""
        more = labels or {}
        pods = [pod(NS, n, list(self.ips[n]), {"app": n, **more.get(n, {})},
                    ports=[WEB] if n == "b" else [], node=NODE) for n in PODS]
        compiled = compile_(pods, list(policies), node_addresses={NODE: self.node_addresses})
        return {k: PodRules(v, self.addresses(k.name)) for k, v in compiled.pods.items()
                if k.name in names}


def key(name: str) -> PodKey:
    return PodKey(NS, name)


@pytest.fixture
def node() -> Iterator[Node]:
    subnets = Subnets.pick()
    with ExitStack() as stack:
        path = stack.enter_context(named_netns("tnode"))
        stack.enter_context(entered(path))
        run_in(path, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        dp = stack.enter_context(started_driver(path, subnets))
        netns, ips = {}, {}
        for name, n in PODS.items():
            netns[name] = stack.enter_context(named_netns(f"tp{name}"))
            network = subnets.pod(netns[name], n)
            wire(dp, network)
            v4, v6 = (str(a.ip) for a in network.addresses)
            ips[name] = (v4, v6)
        yield Node(path, subnets, netns, ips)


@pytest.fixture
def renderer(node: Node) -> NftPolicy:
    return NftPolicy()


def policy(name: str, **spec: Any) -> dict[str, Any]:
    """A NetworkPolicy of namespace `t` selecting the pods labelled app=<select>."""
    select = spec.pop("select")
    return {"metadata": {"namespace": NS, "name": name},
            "spec": {"podSelector": {"matchLabels": {"app": select}}, **spec}}


def from_pod(name: str) -> dict[str, Any]:
    return {"podSelector": {"matchLabels": {"app": name}}}

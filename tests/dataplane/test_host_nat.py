"""The agent's NAT on a node (agent/linux/hostnat), with the kernel dataplane, in test namespaces.

Plan:
- a pod reaches an "outside" host that, like every upstream router, has no route to the pod
  subnets: TCP (1 MiB, checked end to end) and UDP, IPv4 and IPv6; the outside host sees the
  node's address. Without the NAT the same connection gets no answer (so the test can fail);
- NatExcludedCIDRs: a destination listed there is not translated;
- NAT's objects are replaced whole on every apply (no duplicate rules), the table is removed by
  remove(), and another program's table in the same namespace is never touched;
- NAT and the NetworkPolicy renderer share the table: a NAT re-apply (and NAT switched off)
  keeps the policy's chains, maps and counters with their counts, a policy apply or removal
  keeps NAT's chain and sets.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from agent.dataplane.kernel import KernelDataplane
from agent.linux import hostnat
from agent.linux.nftpolicy import NftPolicy, PodRules
from policy import DirectionRules, PodKey, PodPolicy
from testbed.netns import named_netns, run_in, unique
from testbed.pods import Subnets, wire
from testbed.traffic import Server, tcp_transfer, udp_exchange

NODE4, OUT4 = "198.51.100.1", "198.51.100.2"  # TEST-NET-2, inside the test namespaces only
NODE6, OUT6 = "2001:db8:51::1", "2001:db8:51::2"  # documentation prefix, likewise


@pytest.fixture
def outside(node_ns: str) -> Iterator[str]:
    """A host beside the node (veth), with routes to nothing but its own link."""
    with named_netns("tout") as out:
        up = unique("up")
        run_in(node_ns, "ip", "link", "add", up, "type", "veth", "peer", "name", "eth0",
               "netns", out.rsplit("/", 1)[1])
        for ns, ifname, v4, v6 in ((node_ns, up, NODE4, NODE6), (out, "eth0", OUT4, OUT6)):
            run_in(ns, "ip", "addr", "add", f"{v4}/24", "dev", ifname)
            run_in(ns, "ip", "-6", "addr", "add", f"{v6}/64", "dev", ifname, "nodad")
            run_in(ns, "ip", "link", "set", ifname, "up")
            run_in(ns, "ip", "link", "set", "lo", "up")
        yield out


def plan(subnets: Subnets, excluded: tuple[str, ...] = (), table: str = "vswitch-cni"
         ) -> hostnat.NatPlan:
    pods = (subnets.v4, subnets.v6)
    keep = (*pods, *(ipaddress.ip_network(c) for c in excluded))
    return hostnat.NatPlan(pod_nets=pods, keep=keep, external=True, service_return=False,
                           table=table)


def ruleset(netns: str) -> list[dict[str, Any]]:
    """The namespace's whole ruleset, as the real `nft` tool lists it (handles left out)."""
    out = run_in(netns, "nft", "-j", "list", "ruleset").stdout
    objs = [o for o in json.loads(out)["nftables"] if "metainfo" not in o]
    for o in objs:
        for body in o.values():
            body.pop("handle", None)
    return objs


def test_pods_reach_the_outside_through_the_nodes_address(
    dp: KernelDataplane, subnets: Subnets, node_ns: str, pod_netns: str, outside: str
) -> None:
    wire(dp, subnets.pod(pod_netns, 5))
    with Server(outside, "tcp", OUT4, 8080), Server(outside, "udp", OUT4, 8081), \
            Server(outside, "tcp", OUT6, 8080):
        assert not tcp_transfer(pod_netns, OUT4, 8080, 1000).ok  # no route back: no answer
        hostnat.apply(plan(subnets))
        tcp = tcp_transfer(pod_netns, OUT4, 8080)
        assert tcp.ok and tcp.source == NODE4, tcp.detail
        udp = udp_exchange(pod_netns, OUT4, 8081)
        assert udp.ok and udp.source == NODE4, udp.detail
        tcp6 = tcp_transfer(pod_netns, OUT6, 8080)
        assert tcp6.ok and tcp6.source == NODE6, tcp6.detail


def test_excluded_destinations_keep_the_pods_address(
    dp: KernelDataplane, subnets: Subnets, node_ns: str, pod_netns: str, outside: str
) -> None:
    pod = subnets.pod(pod_netns, 6)
    wire(dp, pod)
    # The outside host learns the way back to the pods: it is one of "ours".
    run_in(outside, "ip", "route", "add", str(subnets.v4), "via", NODE4)
    hostnat.apply(plan(subnets, excluded=("198.51.100.0/24",)))
    with Server(outside, "tcp", OUT4, 8082):
        tcp = tcp_transfer(pod_netns, OUT4, 8082, 1000)
    assert tcp.ok and tcp.source == str(pod.addresses[0].ip), tcp.detail


def test_the_table_is_replaced_whole_and_removed_alone(node_ns: str, subnets: Subnets) -> None:
    subprocess.run(["nft", "add", "table", "inet", "someone-else"], check=True)
    subprocess.run(["nft", "add", "chain", "inet", "someone-else", "post",
                    "{ type nat hook postrouting priority 100 ; }"], check=True)
    hostnat.apply(plan(subnets))
    first = ruleset(node_ns)
    hostnat.apply(plan(subnets))
    assert ruleset(node_ns) == first  # rebuilt, not appended to
    rules = [o["rule"] for o in first if "rule" in o]
    assert len(rules) == 2 and all(r["table"] == "vswitch-cni" for r in rules)
    assert hostnat.remove()
    assert not hostnat.remove()  # absent is fine
    tables = {o["table"]["name"] for o in ruleset(node_ns) if "table" in o}
    assert tables == {"someone-else"}


def test_a_plan_without_translation_removes_the_table(node_ns: str, subnets: Subnets) -> None:
    hostnat.apply(plan(subnets))
    off = hostnat.NatPlan((subnets.v4,), (subnets.v4,), external=False,
                          service_return=False)
    hostnat.apply(off)
    assert ruleset(node_ns) == []


def _owners(netns: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ruleset split into the policy renderer's objects and the rest (NAT's)."""
    objs = [o for o in ruleset(netns) if "table" not in o]
    mine = [o for o in objs for body in o.values()
            if str(body.get("name", body.get("chain", ""))).startswith("policy-")]
    return mine, [o for o in objs if o not in mine]


def test_nat_and_the_policy_each_replace_only_their_own_objects(
        node_ns: str, subnets: Subnets) -> None:
    pod = PodKey("t", "a")
    isolated = PodPolicy(pod, (), DirectionRules(True), DirectionRules(True))
    policy = NftPolicy()
    policy.apply({pod: PodRules(isolated, (subnets.v4[5], subnets.v6[5]))})
    hostnat.apply(plan(subnets))
    mine, nat = _owners(node_ns)
    assert mine and nat
    hostnat.apply(plan(subnets, excluded=("198.51.100.0/24",)))  # NAT changes, policy stays
    assert _owners(node_ns)[0] == mine
    policy.apply({pod: PodRules(isolated, (subnets.v4[6],))})  # policy changes, NAT stays
    assert _owners(node_ns)[1] != nat  # (the excluded CIDR above)
    nat = _owners(node_ns)[1]
    policy.remove()
    assert _owners(node_ns) == ([], nat)
    policy.apply({pod: PodRules(isolated, (subnets.v4[5],))})
    mine = _owners(node_ns)[0]
    hostnat.apply(hostnat.NatPlan((subnets.v4,), (subnets.v4,), external=False,
                                  service_return=False))  # NAT off: its objects go, not ours
    assert _owners(node_ns) == (mine, [])
    policy.remove()  # the last owner leaves: the table goes
    assert ruleset(node_ns) == []

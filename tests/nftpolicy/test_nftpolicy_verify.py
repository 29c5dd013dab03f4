"""The renderer's check of the kernel against what it wrote (agent/linux/nftpolicy/verify).

Plan:
- pure: the kernel as written is no drift, idle counters included; a missing element, an extra
  chain, a missing counter, a rule replaced (its comment) or added in a pod chain or the base
  chain, a chain this process did not write: each is a drift, named;
- real nftables (a node namespace with pods): a check that finds nothing rewrites nothing (the
  rules keep their handles), and retires the idle counters; `nft replace rule` by hand (which
  keeps the handle) is found and repaired; the background check repairs a flushed chain on its
  own, without any apply, and the pods' traffic is judged as before; the counters a pod's
  deleted chain left (its drops too) are no drift, and the check deletes them.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import time
from typing import Any

from agent.linux.nftpolicy import NftPolicy, render, transactions, verify
from agent.linux.nftpolicy.views import Count
from testbed.netns import run_in
from tests.nftpolicy.conftest import Node, from_pod, key, policy
from tests.nftpolicy.probes import servers
from tests.nftpolicy.test_nftpolicy_render import ADDR_B, B, rules, web
from tests.nftpolicy.test_nftpolicy_traffic import TCP, UDP, check, rule_handles


def as_written(new: render.Rendered) -> tuple[transactions.Installed, verify.Read]:
    now = transactions.installed(new)
    comments = {name: tuple(transactions.digest(e) for e in body)
                for name, body in new.chains.items()}
    comments[render.BASE] = tuple(transactions.digest(e) for e in transactions.base_bodies())
    held = dataclasses.replace(now, bodies={})
    return now, verify.Read(held, {n: Count(0, 0) for n in now.counters}, comments)


def test_the_kernel_as_written_is_no_drift_and_each_difference_is_named() -> None:
    new = render.render({B: rules(ingress=web(), addresses=ADDR_B, key=B)})
    now, read = as_written(new)
    assert verify.drift(read, now, ()) is None
    chain = render.chain_name(B, "ingress")

    def changed(**kw: Any) -> verify.Read:
        return dataclasses.replace(read, installed=dataclasses.replace(read.installed, **kw))

    assert verify.drift(changed(elements={}), now, ()) == "the map elements"
    assert verify.drift(changed(chains={*now.chains, "policy-pod-x-in"}), now, ()) == \
        "the chains"
    assert verify.drift(changed(counters=set()), now, ()) == "the counters"
    idle = {*now.counters, "policy-allow-gone"}
    assert verify.drift(changed(counters=idle), now, ()) == "the counters"
    assert verify.drift(changed(counters=idle), now, ("policy-allow-gone",)) is None
    assert verify.drift(changed(selves=set()), now, ()) == "the pods' own pairs"
    other = ipaddress.ip_address("10.9.9.9")
    assert verify.drift(changed(policed={*now.policed, other}), now, ()) == "the policed pods"
    replaced = dict(read.comments)
    replaced[chain] = ("", *read.comments[chain][1:])  # `nft replace rule` without our comment
    assert verify.drift(dataclasses.replace(read, comments=replaced), now, ()) == \
        f"the rules of {chain}"
    added = dict(read.comments)
    added[render.BASE] = (*read.comments[render.BASE], "")
    assert verify.drift(dataclasses.replace(read, comments=added), now, ()) == \
        f"the rules of {render.BASE}"
    unknown = dataclasses.replace(now, bodies={})
    assert "not written by this process" in (verify.drift(read, unknown, ()) or "")


ONLY_A = policy("b-in", select="b", ingress=[{"from": [from_pod("a")]}])


def test_a_check_that_finds_nothing_rewrites_nothing_and_a_replaced_rule_is_repaired(
        node: Node) -> None:
    renderer = NftPolicy(verify_every=0)  # every full apply checks
    try:
        renderer.apply(node.desired(ONLY_A))
        handles = rule_handles(node.path)
        renderer.apply(node.desired(ONLY_A))  # checked: as written
        assert rule_handles(node.path) == handles
        chain = render.chain_name(key("b"), "ingress")
        first = min(handles[chain])
        # a rule of b's chain replaced by hand: `nft replace` keeps its handle
        done = run_in(node.path, "nft", "replace", "rule", "inet", "vswitch-cni", chain,
                      "handle", str(first), "accept")
        assert done.returncode == 0, done.stderr
        assert rule_handles(node.path) == handles
        with servers(node.netns["b"], node.ips["b"], (TCP,)):
            check(node, {("c", "b", TCP): True})  # the hand-made rule lets c in
            renderer.apply(node.desired(ONLY_A))  # the check finds it and rewrites
            assert rule_handles(node.path)[chain] != handles[chain]
            check(node, {("a", "b", TCP): True, ("c", "b", TCP): False})
    finally:
        renderer.close()


def test_the_background_check_repairs_a_flushed_chain_without_an_apply(node: Node) -> None:
    renderer = NftPolicy(verify_in_background=True, verify_every=0.2)
    try:
        renderer.apply(node.desired(ONLY_A))
        chain = render.chain_name(key("b"), "ingress")
        run_in(node.path, "nft", "flush", "chain", "inet", "vswitch-cni", chain)
        deadline = time.monotonic() + 10
        while chain not in rule_handles(node.path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert chain in rule_handles(node.path)
        with servers(node.netns["b"], node.ips["b"], (TCP, UDP)):
            check(node, {("a", "b", TCP): True, ("a", "b", UDP): True,
                         ("c", "b", TCP): False, ("c", "b", UDP): False})
    finally:
        renderer.close()


def test_counters_left_by_a_pod_gone_are_no_drift_and_the_check_deletes_them(
        node: Node) -> None:
    renderer = NftPolicy()
    try:
        deny_a = policy("deny-a", select="a")  # a stays isolated: its chain must not move
        renderer.apply(node.desired(deny_a, ONLY_A))
        drop_b = render.drop_counter(key("b"), "ingress")
        renderer.apply(node.desired(deny_a, ONLY_A, names=("a", "c")))  # b gone
        assert drop_b in counters(node.path)  # left for the check (no counter read in a diff)
        handles = rule_handles(node.path)
        assert render.chain_name(key("a"), "ingress") in handles
        renderer.verify_every = 0
        renderer.apply(node.desired(deny_a, ONLY_A, names=("a", "c")))  # the check: no drift
        assert rule_handles(node.path) == handles  # nothing rewritten
        assert drop_b not in counters(node.path)
    finally:
        renderer.close()


def counters(path: str) -> set[str]:
    listed = run_in(path, "nft", "-j", "list", "counters", "table", "inet", "vswitch-cni")
    return {o["counter"]["name"] for o in json.loads(listed.stdout)["nftables"] if "counter" in o}

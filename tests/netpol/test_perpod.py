"""agent/netpol/perpod: a per-pod renderer seen per attachment.

Plan: a full apply merges each pod's attachments; a pod merged from the same policy objects,
addresses and wiring as last time is handed over as the same object (the renderers skip it by
identity), a pod whose policy object, addresses or attachments changed gets a new merge, and
an ADD or DEL of one of its attachments makes the next full apply merge it again; a pod whose
merge is None is not handed over.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from agent.model.pod import PodKey as AttachmentKey
from agent.netpol.perpod import PerPod, merged_addresses
from agent.netpol.types import Counts, Enforced, K8sPod
from policy import DirectionRules, PodPolicy

A, B = K8sPod("ns", "a"), K8sPod("ns", "b")
OPEN = DirectionRules(False)


def policy(pod: K8sPod) -> PodPolicy:
    return PodPolicy(pod, (), OPEN, OPEN)


def enforced(pod: K8sPod, rules: PodPolicy, ip: str, cid: str = "") -> Enforced:
    return Enforced(AttachmentKey(cid or f"c-{pod.name}", "eth0"), pod, rules,
                    (ipaddress.ip_address(ip),), {"host_ifname": f"h-{pod.name}"})


class Seen:
    def __init__(self) -> None:
        self.applied: list[dict[K8sPod, Any]] = []

    def renderer(self) -> PerPod:
        def merge(group: list[Enforced]) -> Any:
            return None if group[0].pod.name == "none" else \
                ("merged", group[-1].policy, merged_addresses(group))
        return PerPod("t", True, self.applied.append, lambda pod, value: None,
                      lambda pod: None, merge, Counts)


def test_an_unchanged_pod_is_handed_over_as_the_same_object() -> None:
    seen = Seen()
    perpod = seen.renderer()
    pa, pb = policy(A), policy(B)
    first = {e.attachment: e for e in (enforced(A, pa, "10.0.0.1"), enforced(B, pb, "10.0.0.2"))}
    perpod.apply(first)
    # the controller's next plan: new Enforced objects, the compiler's same policy objects
    again = {e.attachment: e for e in (enforced(A, pa, "10.0.0.1"), enforced(B, pb, "10.0.0.2"))}
    perpod.apply(again)
    assert seen.applied[1][A] is seen.applied[0][A] and seen.applied[1][B] is seen.applied[0][B]
    # b's policy recompiled (a new object, even if equal): b merged again, a kept
    changed = {**again, AttachmentKey("c-b", "eth0"): enforced(B, policy(B), "10.0.0.2")}
    perpod.apply(changed)
    assert seen.applied[2][A] is seen.applied[0][A]
    assert seen.applied[2][B] is not seen.applied[0][B] and seen.applied[2][B] == seen.applied[0][B]
    # a's address changed: merged again
    moved = {**changed, AttachmentKey("c-a", "eth0"): enforced(A, pa, "10.0.0.9")}
    perpod.apply(moved)
    assert seen.applied[3][A] is not seen.applied[0][A]
    assert seen.applied[3][A][2] == (ipaddress.ip_address("10.0.0.9"),)


def test_an_add_or_del_between_applies_merges_the_pod_again_and_none_is_left_out() -> None:
    seen = Seen()
    perpod = seen.renderer()
    pa = policy(A)
    one = enforced(A, pa, "10.0.0.1")
    perpod.apply({one.attachment: one})
    second = enforced(A, pa, "10.0.0.3", cid="c-a2")  # a replaced sandbox, both live a moment
    perpod.apply_one(second)
    perpod.apply({one.attachment: one, second.attachment: second})
    assert seen.applied[1][A] is not seen.applied[0][A]
    assert seen.applied[1][A][2] == (ipaddress.ip_address("10.0.0.1"),
                                     ipaddress.ip_address("10.0.0.3"))
    none = K8sPod("ns", "none")
    skipped = enforced(none, policy(none), "10.0.0.4")
    perpod.apply({one.attachment: one, skipped.attachment: skipped})
    assert set(seen.applied[2]) == {A}

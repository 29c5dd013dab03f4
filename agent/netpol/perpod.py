"""A per-pod renderer seen per attachment, as the controller calls renderers.

Both renderers (nftables, VPP's ACLs) keep state per Kubernetes pod; the controller works per
attachment (container ID + interface), because while a sandbox is replaced the old and the new
attachment of one pod are live together for a moment, and the old one's DEL must not take the
new one's rules away. `PerPod` keeps the attachments and gives the renderer, for the pod a call
touches, the merge of all of that pod's attachments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agent.netpol.types import AttachmentKey, Counts, Enforced, K8sPod
from policy.model import IPAddress


class PerPod:
    """A per-pod renderer seen per attachment: a pod's attachments merged into one value by
    `merge` (None: nothing to enforce for them), each call the pod's whole state."""

    def __init__(self, name: str, sctp: bool, apply: Callable[[dict[K8sPod, Any]], object],
                 apply_pod: Callable[[K8sPod, Any], object],
                 remove_pod: Callable[[K8sPod], object],
                 merge: Callable[[list[Enforced]], Any], counters: Callable[[], Counts]) -> None:
        self.name = name
        self.sctp = sctp
        self._apply, self._apply_pod, self._remove_pod = apply, apply_pod, remove_pod
        self._merge = merge
        self._counters = counters
        self._attachments: dict[AttachmentKey, Enforced] = {}
        # per pod, the value last merged, with what it was merged from (`_signature`): a full
        # apply hands the renderer the same object for a pod nothing changed of, which the
        # renderer then skips by identity instead of comparing its rules
        self._values: dict[K8sPod, tuple[tuple[Any, ...], list[Any], Any]] = {}

    def _of(self, pod: K8sPod) -> list[Enforced]:
        return [e for e in self._attachments.values() if e.pod == pod]

    def apply(self, desired: Mapping[AttachmentKey, Enforced]) -> None:
        self._attachments = dict(desired)
        groups: dict[K8sPod, list[Enforced]] = {}
        for enforced in desired.values():
            groups.setdefault(enforced.pod, []).append(enforced)
        merged = {pod: self._value(pod, group) for pod, group in groups.items()}
        self._values = {pod: self._values[pod] for pod in merged if pod in self._values}
        values = {pod: value for pod, value in merged.items() if value is not None}
        self._apply(values)

    def _value(self, pod: K8sPod, group: list[Enforced]) -> Any:
        """`merge(group)`, the same object as last time when merged from the same policies
        (the compiler's objects, by identity), addresses and wiring."""
        signature = _signature(group)
        kept = self._values.get(pod)
        if kept is not None and kept[0] == signature:
            return kept[2]
        value = self._merge(group)
        self._values[pod] = (signature, [e.policy for e in group], value)  # ids stay theirs
        return value

    def apply_one(self, enforced: Enforced) -> None:
        self._attachments[enforced.attachment] = enforced
        self._send(enforced.pod)

    def remove_one(self, key: AttachmentKey) -> None:
        gone = self._attachments.pop(key, None)
        if gone is not None:
            self._send(gone.pod)

    def _send(self, pod: K8sPod) -> None:
        self._values.pop(pod, None)
        value = self._merge(self._of(pod))
        if value is None:
            self._remove_pod(pod)
        else:
            self._apply_pod(pod, value)

    def counters(self) -> Counts:
        return self._counters()


def _signature(group: list[Enforced]) -> tuple[Any, ...]:
    return tuple((e.attachment, id(e.policy), e.addresses, sorted(e.wiring.items()))
                 for e in group)


def merged_addresses(group: list[Enforced]) -> tuple[IPAddress, ...]:
    return tuple(dict.fromkeys(a for e in group for a in e.addresses))


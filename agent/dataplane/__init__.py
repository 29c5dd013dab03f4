"""Dataplane drivers: one per vswitch, all behind the `Dataplane` protocol.

A driver owns the host side of a pod's wiring (veth/TAP, the vswitch's interface, routes and
neighbors towards the pod) and creates the pod's interface inside the pod network namespace under
the name the runtime asked for. The pod side's addresses and routes are then set by
agent/linux/pod_netns, which is the same for every driver. Every step a driver completes is pushed
on the `UndoStack` it is given, so a later failure in the ADD removes it again; what a DEL retires
a driver may leave to a `LinkReaper` (both in agent/dataplane/undo). This module is the contract
only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agent.dataplane.undo import UndoStack
from agent.linux.netns import PodNetns
from agent.model.pod import PodKey, PodNetwork, Wiring


class Dataplane(Protocol):
    """The contract every dataplane driver fulfils."""

    name: str

    def start(self) -> None:
        """Base configuration of the vswitch (VRFs, gateway, host interconnect). Idempotent."""

    def attach(
        self, pod: PodNetwork, undo: UndoStack, netns: PodNetns | None = None
    ) -> Wiring:
        """Creates the pod's interface (named pod.key.ifname inside pod.netns) and the host side.

        `netns`: pod.netns as the request holds it open and checked (an ADD); a driver that
        works in the namespace itself uses it instead of opening the path again. None: the
        driver opens the path where it needs it (repair, tests).
        Raises a CniError subclass; every completed step is on `undo`.
        """
        ...

    def detach(self, pod: PodNetwork, wiring: Wiring | None) -> None:
        """Removes everything attach created. Idempotent: succeeds when parts are already gone."""

    def check(self, pod: PodNetwork, wiring: Wiring) -> list[str]:
        """Compares the live host side with the record; returns what is wrong (empty = fine)."""
        ...

    def check_many(self, pods: Sequence[tuple[PodNetwork, Wiring]]) -> list[list[str]]:
        """`check` of every pod given, in order, with the same answers, reading the vswitch's
        tables once for all of them (reconcile after a restart)."""
        ...

    def tag(self, key: PodKey) -> str:
        """The owner tag this driver puts on the objects of attachment `key`."""
        ...

    def owned(self) -> dict[str, str]:
        """Pod objects this driver finds tagged as ours, as {object name: owner tag}."""
        ...

    def remove_orphan(self, name: str) -> None:
        """Removes an object named by `owned()` that no pod record explains, with its routes."""

    def restore(self, pod: PodNetwork, wiring: Wiring) -> Wiring | None:
        """Re-creates the host side of a live pod whose wiring the vswitch lost (a restarted
        VPP), keeping the pod's interface; returns the new wiring, or None when the driver
        cannot do it in place (the caller then re-wires the pod from scratch)."""
        ...

    def generation(self) -> int:
        """Changes whenever the driver has (re)connected to its vswitch: pods wired before
        may have lost their host side (a restarted VPP forgets everything)."""
        ...

    def ready(self) -> bool:
        """True when the vswitch can take ADDs now (probes it)."""
        ...

    def close(self) -> None:
        """Releases connections; leaves pods wired."""

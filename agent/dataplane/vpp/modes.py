"""The small interface every wiring mode implements (veth + AF_PACKET, TAP v2).

A mode creates the link between the pod's namespace and VPP and returns VPP's interface for it;
everything after that (VRF, unnumbered, MTU, routes, neighbors) is the same for every mode and is
done by the driver. `remove` must be idempotent: attach's undo and DEL both use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agent.dataplane import UndoStack
from agent.model.pod import PodNetwork


@dataclass(frozen=True)
class Port:
    """A pod's link into VPP, as created by a mode."""

    sw_if_index: int
    host_ifname: str  # veth host end, or the TAP's VPP name
    pod_mac: str
    vpp_mac: str


class WiringMode(Protocol):
    name: str

    def check_usable(self) -> None:
        """Raises DataplaneFailure when this node cannot use the mode (says what to change)."""

    def create(self, pod: PodNetwork, tag: str, undo: UndoStack) -> Port:
        """Creates the link and VPP's (tagged) interface; each step pushed on `undo`."""
        ...

    def adopt(self, pod: PodNetwork, tag: str, undo: UndoStack) -> Port | None:
        """Makes VPP's interface again for a link that survived a VPP restart; None when the
        link did not survive (TAPs die with VPP) and the pod must be wired from scratch."""
        ...

    def vpp_name(self, pod: PodNetwork) -> str | None:
        """The name VPP gives the pod's interface, when the pod alone decides it (then the
        driver finds the interface with one filtered request instead of a dump of all)."""
        ...

    def remove(self, pod: PodNetwork, sw_if_index: int | None) -> None:
        """Removes VPP's interface, then the link; missing parts are fine. `sw_if_index` is
        the pod's VPP interface, or None when the driver looked and VPP has none. When VPP's
        part cannot be removed the link stays (VPP may still use it) and the error is raised."""

    def problems(self, pod: PodNetwork, sw_if_index: int) -> list[str]:
        """What is wrong with the link outside VPP's interface table (empty = fine)."""
        ...

"""The small interface every wiring mode implements (veth + AF_PACKET, TAP v2).

A mode creates the link between the pod's namespace and VPP and returns VPP's interface for it;
everything after that (VRF, unnumbered, MTU, routes, neighbors) is the same for every mode and is
done by the driver. `remove` must be idempotent: attach's undo and DEL both use it. `wiring` is
the pod's record when there is one (a DEL without one, and an ADD's leftovers, pass None): a
mode whose names do not derive from the pod key finds its link there, or by the pod's tag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agent.dataplane.undo import UndoStack
from agent.linux.netns import PodNetns
from agent.model.pod import PodNetwork, Wiring


@dataclass(frozen=True)
class Port:
    """A pod's link into VPP, as created by a mode."""

    sw_if_index: int
    host_ifname: str  # veth host end, or the TAP's VPP name
    pod_mac: str
    vpp_mac: str
    # VPP's interface is in the pod VRF, unnumbered, MTU set and up already (a pool's spare)
    prepared: bool = False
    # the owner tag the driver's pipeline sets first, before anything else of the pod's (one
    # round trip less than a call of its own); None: the mode tagged the interface itself
    tag: str | None = None


class WiringMode(Protocol):
    name: str

    def check_usable(self) -> None:
        """Raises DataplaneFailure when this node cannot use the mode (says what to change)."""

    def create(self, pod: PodNetwork, tag: str, undo: UndoStack,
               netns: PodNetns | None = None) -> Port:
        """Creates the link and VPP's (tagged) interface; each step pushed on `undo`. `netns`:
        the pod's namespace when the ADD holds it open."""
        ...

    def adopt(self, pod: PodNetwork, tag: str, undo: UndoStack, wiring: Wiring) -> Port | None:
        """Makes VPP's interface again for a link that survived a VPP restart; None when the
        link did not survive (TAPs die with VPP) and the pod must be wired from scratch."""
        ...

    def vpp_names(self, pod: PodNetwork, wiring: Wiring | None) -> list[str] | None:
        """The names VPP may give the pod's interface, when the mode knows them (then the
        driver finds it with filtered requests instead of a dump of all; [] when the pod has
        no link, so no interface either); None: the driver looks for the pod's tag."""
        ...

    def remove(self, pod: PodNetwork, sw_if_index: int | None, wiring: Wiring | None) -> None:
        """Removes VPP's interface, then the link; missing parts are fine. `sw_if_index` is
        the pod's VPP interface, or None when the driver looked and VPP has none. When VPP's
        part cannot be removed the link stays (VPP may still use it) and the error is raised."""

    def problems(self, pod: PodNetwork, sw_if_index: int, wiring: Wiring) -> list[str]:
        """What is wrong with the link outside VPP's interface table (empty = fine)."""
        ...

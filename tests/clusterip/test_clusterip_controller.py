"""The ClusterIP controller (agent/clusterip/controller.py) with a cache and a renderer of its
own (no threads: the loop's body is run directly).

Plan: nothing is applied before the cache has listed (TryAgainLater, the renderer untouched);
then the translations of the cache's Services and slices, of the node's pod families only, go
to the renderer with the node's pod interfaces; internalTrafficPolicy Local uses the node's
name; a renderer failure propagates (the loop retries) and leaves `installed()` as it was;
`changed` wakes the loop for Services, EndpointSlices and a VPP reconnect, not for other kinds.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from agent.clusterip.controller import ClusterIPController
from agent.model.errors import TryAgainLater
from services import (
    Endpoint,
    EndpointPort,
    EndpointSlice,
    Service,
    ServicePort,
    Translation,
    TranslationKey,
)

ip = ipaddress.ip_address


class Cache:
    def __init__(self) -> None:
        self.synced = False
        self.svcs: dict[tuple[str, str], Service] = {}
        self.slices: dict[tuple[str, str], EndpointSlice] = {}

    def services(self) -> Mapping[tuple[str, str], Service]:
        return self.svcs

    def endpoint_slices(self) -> Mapping[tuple[str, str], EndpointSlice]:
        return self.slices

    def wait_synced(self, timeout: float) -> bool:
        return self.synced


class Renderer:
    def __init__(self) -> None:
        self.calls: list[tuple[dict[TranslationKey, Translation], list[int]]] = []
        self.fail = False

    def apply(self, desired: Mapping[TranslationKey, Translation],
              pod_interfaces: Iterable[int] = ()) -> Any:
        if self.fail:
            raise TryAgainLater("VPP is away")
        self.calls.append((dict(desired), list(pod_interfaces)))


def make(cache: Cache, renderer: Renderer, families: tuple[int, ...] = (4,)
         ) -> ClusterIPController:
    return ClusterIPController(cache, renderer, "n1", lambda: [7, 9], families=families,
                               debounce=0, sync_wait=0)


def world(cache: Cache, local: bool = False) -> None:
    cache.svcs[("ns", "web")] = Service("ns", "web", (ip("10.96.0.10"), ip("fd00::10")),
                                        (ServicePort("http", "TCP", 80),),
                                        internal_traffic_local=local)
    ports = (EndpointPort("http", "TCP", 8080),)
    cache.slices[("ns", "w4")] = EndpointSlice("ns", "w4", "web", "IPv4", (
        Endpoint((ip("10.1.1.2"),), True, "n1"), Endpoint((ip("10.1.2.2"),), True, "n2")), ports)
    cache.slices[("ns", "w6")] = EndpointSlice("ns", "w6", "web", "IPv6", (
        Endpoint((ip("fd00:1::2"),), True, "n1"),), ports)


def test_nothing_before_the_first_list_then_the_node_families() -> None:
    cache, renderer = Cache(), Renderer()
    world(cache)
    controller = make(cache, renderer)
    with pytest.raises(TryAgainLater):
        controller.run_once()
    assert renderer.calls == []
    cache.synced = True
    controller.run_once()
    ((desired, interfaces),) = renderer.calls
    assert list(desired) == [TranslationKey(ip("10.96.0.10"), 80, "TCP")]
    assert [str(b) for b in desired[TranslationKey(ip("10.96.0.10"), 80, "TCP")].backends] == \
        ["10.1.1.2:8080", "10.1.2.2:8080"]
    assert interfaces == [7, 9]
    assert controller.installed() == desired and controller.applies == 1


def test_dual_stack_and_local_traffic_policy() -> None:
    cache, renderer = Cache(), Renderer()
    world(cache, local=True)
    cache.synced = True
    make(cache, renderer, families=(4, 6)).run_once()
    desired = renderer.calls[0][0]
    assert {str(k): [str(b) for b in t.backends] for k, t in desired.items()} == {
        "TCP 10.96.0.10:80": ["10.1.1.2:8080"], "TCP [fd00::10]:80": ["[fd00:1::2]:8080"]}


def test_a_failed_apply_propagates_and_keeps_the_last() -> None:
    cache, renderer = Cache(), Renderer()
    world(cache)
    cache.synced = True
    controller = make(cache, renderer)
    controller.run_once()
    before = controller.installed()
    del cache.slices[("ns", "w4")]
    renderer.fail = True
    with pytest.raises(TryAgainLater):
        controller.run_once()
    assert controller.installed() == before
    renderer.fail = False
    controller.run_once()
    assert renderer.calls[-1][0] == {} and controller.installed() == {}


def test_changed_wakes_for_its_kinds_only() -> None:
    controller = make(Cache(), Renderer())
    woken: list[str] = []
    controller.loop.wake = lambda: woken.append("x")  # type: ignore[method-assign]
    for kind in ("pods", "networkpolicies", "services", "endpointslices", "dataplane", "nodes"):
        controller.changed(kind)
    assert len(woken) == 3

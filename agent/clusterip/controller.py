"""The Service translation controller: the renderer's translations kept equal to what the
cluster's Services and EndpointSlices say (docs/vpp.md, "Services translated in VPP").

One path: a SupervisedLoop ("clusterip") that, after a change of the cache's Services or
EndpointSlices (woken; an apply within `debounce` of the last one waits `debounce` first, so
that a rollout's burst of slice updates costs one apply: loops.Debounce), every `resync` seconds
and after VPP reconnected, computes the translations (`services.translations`, this node's name
for internalTrafficPolicy Local and its own addresses for NodePorts; addresses of the families
the node's pods have) and gives them, with the node's pod interfaces, to the renderer, which
diffs and changes only what changed. Until the cache has listed once nothing is applied: what
VPP holds (it keeps its translations while the agent restarts) stays as it is. A failed apply
(VPP away) is retried with the loop's backoff; the next apply after VPP came back makes every
translation again.

The request path never waits for it: a new pod's interface gets cnat from the driver in its
ADD, and a new Service is translated one apply after its slices' arrival (plus `debounce` in a
burst).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from agent.infra.loops import Debounce, SupervisedLoop
from agent.model.errors import TryAgainLater
from services import EndpointSlice, Service, Translation, TranslationKey, translations
from services.model import IPAddress

log = logging.getLogger(__name__)

KINDS = ("services", "endpointslices", "dataplane")  # what wakes the controller


class ServiceSource(Protocol):
    """The Kubernetes cache as the controller reads it (agent/kube/reflector.KubeState)."""

    def services(self) -> Mapping[tuple[str, str], Service]: ...

    def endpoint_slices(self) -> Mapping[tuple[str, str], EndpointSlice]: ...

    def wait_synced(self, timeout: float) -> bool: ...


class TranslationRenderer(Protocol):
    """What installs translations (agent/dataplane/vpp/cnat.VppServices)."""

    def apply(self, desired: Mapping[TranslationKey, Translation],
              pod_interfaces: Iterable[int] = ()) -> Any: ...


class ClusterIPController:
    """This node's Service translations (see the module docstring). `node_ips`: the node's own
    addresses, read at each apply (its Node object's InternalIPs may come and go)."""

    def __init__(self, source: ServiceSource, renderer: TranslationRenderer, node: str,
                 pod_interfaces: Callable[[], Iterable[int]], *, families: Iterable[int] = (4, 6),
                 node_ips: Callable[[], Iterable[IPAddress]] = tuple,
                 debounce: float = 0.05, resync: float = 30.0, sync_wait: float = 5.0) -> None:
        self.source = source
        self._node_ips = node_ips
        self.renderer = renderer
        self.node = node
        self._pod_interfaces = pod_interfaces
        self.families = frozenset(families)
        self.debounce = Debounce(debounce)
        self.sync_wait = sync_wait
        self._synced = False
        self._lock = threading.Lock()
        self._desired: dict[TranslationKey, Translation] = {}
        self.applies = 0
        self.loop = SupervisedLoop("clusterip", self.run_once, resync, immediately=True,
                                   backoff=(0.2, 5.0), expected=(TryAgainLater,), log=log)

    def start(self) -> None:
        self.loop.start()

    def stop(self) -> None:
        self.loop.stop()

    def changed(self, kind: str = "") -> None:
        """The cache changed (in a watch thread), or VPP reconnected ("dataplane")."""
        if kind in KINDS:
            self.loop.wake()

    def run_once(self) -> None:
        if not self._synced:
            if not self.source.wait_synced(self.sync_wait):
                raise TryAgainLater("Service translation: the Kubernetes cache has not listed "
                                    "yet; the translations in place stay as they are")
            self._synced = True
        self.debounce.wait()  # a burst of slice updates (a rollout) becomes one apply
        try:
            self.apply_all()
        finally:
            self.debounce.done()

    def desired(self) -> dict[TranslationKey, Translation]:
        """The translations the cache asks for now."""
        found = translations(self.source.services().values(),
                             self.source.endpoint_slices().values(), self.node, self._node_ips())
        return {k: t for k, t in found.items() if k.vip.version in self.families}

    def apply_all(self) -> None:
        desired = self.desired()
        self.renderer.apply(desired, list(self._pod_interfaces()))
        with self._lock:
            self._desired = desired
            self.applies += 1

    def installed(self) -> dict[TranslationKey, Translation]:
        """What the last successful apply installed (for REST and metrics)."""
        with self._lock:
            return dict(self._desired)

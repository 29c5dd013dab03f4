"""KubeState: the cluster's Pods, Namespaces, NetworkPolicies and Nodes (with `services=True`
also Services and EndpointSlices), cached on the node.

    state = KubeState(kubeconfig=None, resync=300.0, on_change=lambda kind: ...)
    state.start()                  # a list+watch per kind, one thread each (+ a reader per watch)
    state.wait_synced(10.0)        # True once every kind was listed once
    state.pods(), .namespaces(), .nodes()      copies of the caches
    state.policies()               the policies, one mapping shared until they change (read only)
    state.pod_changes(token)       the pods changed since `token` (all of them the first time)
    state.services(), .endpoint_slices()                    (with services=True)
    state.pod("web", "db")         the cache, else ONE bounded GET (the CNI ADD's pod)
    state.error                    why the last round of some kind failed ("" when none did)
    state.stop()

Each kind is a ListWatch (agent/infra/listwatch) over a KubeSource (agent/kube/source): list,
then watch with bookmarks; a routine end resumes from the last revision, a 410 or a broken
connection relists (the diff against the cache reaches on_change), and so does the resync
timer. While the API is away nothing changes in the caches: they keep the last state seen,
`synced` stays as it was, `error` says why, and the loops retry with backoff.

`on_change(kind)` is called in that kind's thread after its cache changed (a watch event that
changed the value, or a list whose diff is not empty: the first list of a kind with objects is
one call): it should be quick (a wake-up); an exception from it is logged, never a reason to
relist. Readers are thread-safe copies; pods and policies are keyed by PodKey(namespace, name),
namespaces and nodes by name.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any
from urllib.parse import quote

from prometheus_client import CollectorRegistry, Counter

import policy
import services as svc
from agent.infra.listwatch import Change, Changes, Handler, ListWatch, Relist
from agent.kube.api import KubeApi
from agent.kube.objects import (
    ENDPOINTSLICES,
    NAMESPACES,
    NODES,
    PODS,
    POLICIES,
    SERVICES,
    Key,
    Kind,
    KubeError,
    KubeNode,
    V,
)
from agent.kube.refusals import Refusals
from agent.kube.source import KubeSource

log = logging.getLogger(__name__)


class _Notify(Handler[Key, Any, str]):
    """Tells `on_change` of real changes of one kind (a MODIFIED that changed nothing the
    agent keeps, such as a pod's conditions, is none) and counts lists."""

    def __init__(self, kind: str, on_change: Callable[[str], None] | None,
                 lists: Counter) -> None:
        self.kind = kind
        self.callback = on_change
        self.lists = lists.labels(kind)

    def on_change(self, change: Change[Key, Any]) -> None:
        if change.old != change.new:
            self._tell()

    def on_relist(self, relist: Relist[Key, Any, str]) -> None:
        self.lists.inc()
        if relist.previous is not None:
            log.info("%s relisted at %s: %d changes", self.kind, relist.revision,
                     len(relist.changes))
        if relist.changes:
            self._tell()

    def _tell(self) -> None:
        if self.callback is None:
            return
        try:
            self.callback(self.kind)
        except Exception:  # the caller's bug must not cost a relist of the kind
            log.exception("on_change(%r) failed", self.kind)


class KubeState:
    """The caches of the cluster's state, and the one GET of a pod the caches lack."""

    def __init__(
        self,
        kubeconfig: str | None,
        *,
        resync: float = 300.0,
        on_change: Callable[[str], None] | None = None,
        watch_timeout: float = 300.0,
        get_timeout: float = 2.0,
        backoff: tuple[float, float] = (0.5, 10.0),
        registry: CollectorRegistry | None = None,
        services: bool = False,
    ) -> None:
        """`kubeconfig`: a kubeconfig file, or None for the pod's service account (raises
        KubeError when that config cannot be read; no request is made before start()).
        `resync`: seconds between relists of a kind; `watch_timeout`: the least timeoutSeconds
        of a watch; `get_timeout`: the bound of `pod()`'s GET; `registry`: where the counters
        go (the agent's metrics registry; a private one when None); `services`: Services and
        EndpointSlices too (the agent translates ClusterIPs itself)."""
        self.api = KubeApi(kubeconfig)
        self.get_timeout = get_timeout
        registry = registry if registry is not None else CollectorRegistry()
        refused = Counter(
            "vswitch_cni_kube_refused_objects", "Kubernetes objects left out of the reflector's "
            "caches because they could not be read (each object once per error).", ["kind"],
            registry=registry)
        self.refusals = Refusals(refused)
        lists = Counter("vswitch_cni_kube_lists", "LISTs of a kind by the reflector: the first, "
                        "then each relist (410 Gone, a broken watch, the resync timer).",
                        ["kind"], registry=registry)
        self._sources: dict[str, KubeSource[Any]] = {}
        self._watches: dict[str, ListWatch[Key, Any, str]] = {}
        self._policies: tuple[tuple[int, int], Mapping[policy.PodKey, policy.NetworkPolicy]] \
            | None = None
        kinds: tuple[Kind[Any], ...] = (PODS, NAMESPACES, POLICIES, NODES)
        if services:
            kinds += (SERVICES, ENDPOINTSLICES)
        for kind in kinds:
            refused.labels(kind.name)  # every kind's series from the start, at 0
            lists.labels(kind.name)
            self._add(kind, on_change, lists, resync, watch_timeout, backoff)

    def _add(self, kind: Kind[V], on_change: Callable[[str], None] | None, lists: Counter,
             resync: float, watch_timeout: float, backoff: tuple[float, float]) -> None:
        source = KubeSource(self.api, kind, self.refusals, watch_timeout=watch_timeout)
        self._sources[kind.name] = source
        self._watches[kind.name] = ListWatch(
            f"kube-{kind.name}", source, [_Notify(kind.name, on_change, lists)], resync=resync,
            backoff=backoff, expected=(KubeError,), log=log)

    # ---- control ---------------------------------------------------------------------------

    def start(self) -> None:
        for watch in self._watches.values():
            watch.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ends every watch (their responses are shut), joins the threads, closes the client."""
        for watch in self._watches.values():
            watch.loop.stopping.set()  # all at once: none lists again while another stops
        for watch in self._watches.values():
            watch.stop(timeout)
        for source in self._sources.values():
            source.join(timeout)
        self.api.close()

    def relist(self) -> None:
        """Every kind lists again now (the caller lost what on_change told it)."""
        for watch in self._watches.values():
            watch.relist_now()

    @property
    def synced(self) -> bool:
        """Every kind was listed at least once."""
        return all(w.synced.is_set() for w in self._watches.values())

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout  # one bound for all the waits
        return all(w.synced.wait(max(0.0, deadline - time.monotonic()))
                   for w in self._watches.values())

    @property
    def error(self) -> str:
        """The failures of the kinds' last rounds, "" when none failed (for health)."""
        return "; ".join(f"{name}: {w.error}" for name, w in self._watches.items() if w.error)

    def revisions(self) -> dict[str, str | None]:
        """The resourceVersion each cache has reached (None: not listed yet)."""
        return {name: w.revision for name, w in self._watches.items()}

    def refused(self) -> dict[str, str]:
        """Objects left out now ("kind namespace/name" -> why; agent/kube/refusals)."""
        return self.refusals.refused()

    # ---- readers: copies of the caches, never a request ----------------------------------

    def pods(self) -> dict[policy.PodKey, policy.Pod]:
        return {policy.PodKey(*k): v for k, v in self._watches[PODS.name].items().items()}

    def pod_changes(self, since: tuple[int, int] | None
                    ) -> Changes[policy.PodKey, policy.Pod]:
        """The pods changed since `since` (a token from the last call), with no copy of the
        others; every pod when `since` is None or the pods were listed again since
        (agent/infra/listwatch `changes`)."""
        got = self._watches[PODS.name].changes(since)
        full = None if got.full is None else {policy.PodKey(*k): v for k, v in got.full.items()}
        return Changes(got.token, full, {policy.PodKey(*k): v for k, v in got.changed.items()})

    def namespaces(self) -> dict[str, policy.Namespace]:
        return {k[1]: v for k, v in self._watches[NAMESPACES.name].items().items()}

    def policies(self) -> Mapping[policy.PodKey, policy.NetworkPolicy]:
        """By (namespace, name) of the policy. Every compile reads all of them (an ADD's
        too): the mapping is made again only after a change, and is the callers' to read,
        never to change."""
        watch = self._watches[POLICIES.name]
        token = watch.token()  # before the copy: a change in between only makes it again
        kept = self._policies
        if kept is None or kept[0] != token:
            kept = self._policies = (token, MappingProxyType(
                {policy.PodKey(*k): v for k, v in watch.items().items()}))
        return kept[1]

    def nodes(self) -> dict[str, KubeNode]:
        return {k[1]: v for k, v in self._watches[NODES.name].items().items()}

    def node(self, name: str) -> KubeNode | None:
        """One Node from the cache (no copy of the others)."""
        return self._watches[NODES.name].get(("", name))

    def services(self) -> dict[tuple[str, str], svc.Service]:
        """By (namespace, name); empty unless built with services=True."""
        watch = self._watches.get(SERVICES.name)
        return dict(watch.items()) if watch is not None else {}

    def endpoint_slices(self) -> dict[tuple[str, str], svc.EndpointSlice]:
        watch = self._watches.get(ENDPOINTSLICES.name)
        return dict(watch.items()) if watch is not None else {}

    def pod(self, namespace: str, name: str) -> policy.Pod | None:
        """The pod from the cache; on a miss ONE GET of it (bounded by `get_timeout`), since
        the CNI ADD may come before the watch delivered the pod. None when it does not exist,
        is refused, or the GET fails; never raises. The GET's answer is not cached (the
        watch will bring the pod, newer)."""
        cached: policy.Pod | None = self._watches[PODS.name].get((namespace, name))
        if cached is not None:
            return cached
        path = PODS.object_path(quote(namespace, safe=""), quote(name, safe=""))
        try:
            obj = self.api.get(path, self.get_timeout)
            return None if obj is None else policy.pod_from_k8s(obj)
        except (KubeError, ValueError) as exc:
            log.warning("pod %s/%s: not in the cache, and its GET failed: %s", namespace, name,
                        exc)
        except Exception:  # never raise into the CNI ADD
            log.exception("pod %s/%s: GET", namespace, name)
        return None

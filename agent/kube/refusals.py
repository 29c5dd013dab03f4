"""Objects the converters refuse: each logged once with the error, counted, and left out.

What leaving out means for enforcement, per kind:
- a NetworkPolicy: it is not enforced; the pods it selects are isolated only by the other
  policies (if none selects them, they are open). The API server validated it, so a refusal
  means the parser and the API server disagree: the error says where, a bug to fix;
- a Pod: not compiled (no rules of its own) and no peer of anyone's rules: policies that should
  allow its traffic by selector do not (it fails closed for its peers);
- a Namespace: its pods look as if it had only the `kubernetes.io/metadata.name` label, so a
  namespaceSelector on other labels does not match them;
- a Node: its addresses are not exempt on its pods (the kubelet's probes may be blocked);
- a Service: not translated in VPP (kube-proxy on the node still translates it);
- an EndpointSlice: its endpoints are no backends of the VPP translation (a Service with no
  other slice is left to kube-proxy).

The counter `vswitch_cni_kube_refused_objects_total{kind}` counts refusals: an object counts
again only when its error changes (each new resourceVersion that is still refused for the same
reason does not), so the rate stays readable; `refused()` lists what is left out now.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TypeVar

from prometheus_client import Counter

from agent.kube.objects import Key, Kind

log = logging.getLogger(__name__)

V = TypeVar("V")


class Refusals:
    """Converts objects of every kind, remembering which are refused and why."""

    def __init__(self, counter: Counter) -> None:
        self._counter = counter
        self._lock = threading.Lock()  # the watch threads convert, readers read
        self._refused: dict[tuple[str, Key], str] = {}

    def decode(self, kind: Kind[V], key: Key, obj: Mapping[str, object]) -> V | None:
        """The object's value, or None when its converter refuses it (logged, counted)."""
        try:
            value = kind.convert(obj)
        except ValueError as exc:
            self._refuse(kind.name, key, str(exc))
            return None
        self.forget(kind.name, key)
        return value

    def _refuse(self, kind: str, key: Key, error: str) -> None:
        with self._lock:
            if self._refused.get((kind, key)) == error:
                return
            self._refused[(kind, key)] = error
        self._counter.labels(kind).inc()
        log.error("%s %s left out (refused): %s", kind, "/".join(filter(None, key)), error)

    def forget(self, kind: str, key: Key) -> None:
        """The object is accepted again, or deleted."""
        with self._lock:
            self._refused.pop((kind, key), None)

    def keep_only(self, kind: str, keys: set[Key]) -> None:
        """After a list: the refusals of objects the list no longer has go."""
        with self._lock:
            for gone in [k for k in self._refused if k[0] == kind and k[1] not in keys]:
                del self._refused[gone]

    def refused(self) -> dict[str, str]:
        """What is left out now: "kind namespace/name" -> the error."""
        with self._lock:
            return {f"{kind} {'/'.join(filter(None, key))}": error
                    for (kind, key), error in sorted(self._refused.items())}

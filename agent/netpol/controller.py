"""The policy controller: the node's attachments' rules, kept equal to what the cluster's
NetworkPolicies say.

Two paths, one compiler:

- **Full apply** (a SupervisedLoop, "netpol"): after any change of the Kubernetes cache (woken:
  at once on a quiet node, after `debounce` when the last apply ended within it, so a burst of
  events costs one apply; loops.Debounce) and every `resync` seconds (a
  VPP restart that lost its ACLs, anything missed), the local attachments' rules are compiled
  (this node's pods only, peers from the whole cluster) and every renderer gets the whole
  desired state; renderers diff and change only what changed. No node holds rules for
  another node's pods: each pod is judged on its own node, with the source its packets arrive
  with there (docs/policy.md, "Only the pod's own node is exempt"). Until the cache has listed
  once, nothing is applied: the rules in place (nftables and VPP keep them while the
  agent restarts) stay as they are, rather than opening every pod for the moments of a restart.
- **Before the ADD**: the full apply also compiles the pods the cache has on this node without
  an attachment yet (bound to the node, the kubelet still starting the sandbox), and hands them
  to the renderers with no address (`scheduled_key`): the nftables renderer makes their chains
  and counters, which name no address of the pod, and enforces nothing for them; VPP's,
  which needs the interface, ignores them. Their ADD then adds elements only (docs/policy.md).
- **ADD** (`admit`, a step of the ADD before the pod side gets its addresses, so before the pod
  can send or receive anything): the pod's rules from the cached policies and the pod's labels,
  installed by every renderer before the CNI answer: a pod is isolated from its first packet.
  The pod's labels come from the cache or one GET of the pod; with the cache never listed (the
  API unreachable since the agent started) the ADD fails with "try again later" (11): a pod
  whose isolation is unknown is not started. `release` (DEL, and the ADD's undo) removes them.

Addresses: a local pod's own addresses come from its records (the API learns them only later,
from the kubelet); other pods' from the API. The node's addresses are exempt both ways, as the
spec requires (kubelet probes).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from ipaddress import ip_interface
from typing import Any

from agent.infra.loops import Debounce, SupervisedLoop
from agent.model.errors import TryAgainLater
from agent.model.pod import PodRecord
from agent.netpol.index import KeptIndex
from agent.netpol.types import (
    AttachmentKey,
    Counts,
    Enforced,
    K8sPod,
    PolicySource,
    Renderer,
)
from policy import Compiled, Pod
from policy.model import IPAddress

log = logging.getLogger(__name__)


def scheduled_key(pod: K8sPod) -> AttachmentKey:
    """The stand-in attachment of a pod scheduled to this node before its ADD: renderers make
    what its ADD will need (the nftables chains), with no address, so nothing is enforced."""
    return AttachmentKey(container_id=f"scheduled:{pod.namespace}/{pod.name}", ifname="")


def is_scheduled(key: AttachmentKey) -> bool:
    return key.ifname == "" and key.container_id.startswith("scheduled:")


def record_pod(record: PodRecord) -> K8sPod | None:
    """The Kubernetes pod of an attachment (None: no K8S_POD_* arguments, not a pod's)."""
    if not record.pod_namespace or not record.pod_name:
        return None
    return K8sPod(record.pod_namespace, record.pod_name)


def record_addresses(record: PodRecord) -> tuple[IPAddress, ...]:
    return _parsed(tuple(record.addresses))


@functools.lru_cache(maxsize=4096)
def _parsed(addresses: tuple[str, ...]) -> tuple[IPAddress, ...]:
    """Each plan reads every record's addresses: parsed once (a node holds a few hundred)."""
    return tuple(ip_interface(a).ip for a in addresses)


class PolicyController:
    """This node's NetworkPolicy enforcement (see the module docstring)."""

    def __init__(
        self,
        source: PolicySource,
        renderers: Sequence[Renderer],
        node: str,
        node_addresses: Callable[[], Iterable[IPAddress]],
        records: Callable[[], list[PodRecord]],
        *,
        debounce: float = 0.05,
        resync: float = 30.0,
        sync_wait: float = 5.0,
    ) -> None:
        self.source = source
        self.renderers = list(renderers)
        self.node = node
        self._node_addresses = node_addresses
        self._records = records
        self.debounce = Debounce(debounce)
        self.sync_wait = sync_wait
        self.sctp = all(r.sctp for r in self.renderers)
        self._lock = threading.Lock()  # one apply or admit at a time: renderers are not shared
        self._installed: dict[AttachmentKey, Enforced] = {}
        self._admitted: dict[AttachmentKey, PodRecord] = {}  # ADDs not in the records yet
        self._version = 0  # counts admits and releases (apply_all plans outside the lock)
        self._last: dict[AttachmentKey, Enforced] | None = None  # the last apply's input
        self._forced = float("-inf")
        self._changed_dataplane = False
        self._warnings: tuple[str, ...] = ()
        self._synced = False
        self._index = KeptIndex(node)  # the compiler's index of the cluster, between compiles
        # this node's pods as the last full compile made them from the records, and per pod
        # the object made (kept while its source and addresses are: the index sees no change)
        self._local: dict[K8sPod, Pod] = {}
        self._made: dict[K8sPod, tuple[Pod, tuple[IPAddress, ...], Pod]] = {}
        self.applies = 0
        self.last_apply = 0.0  # time.time() of the last full apply
        self.loop = SupervisedLoop("netpol", self.run_once, resync, immediately=True,
                                   backoff=(0.2, 5.0), log=log)

    # ---- the background loop ---------------------------------------------------------------

    def start(self) -> None:
        self.loop.start()

    def stop(self) -> None:
        self.loop.stop()

    def changed(self, kind: str = "") -> None:
        """The cache changed (called in the watch's thread): apply soon; "dataplane" (VPP
        reconnected: its ACLs are gone) makes the next apply a forced one."""
        if kind == "dataplane":
            self._changed_dataplane = True
        self.loop.wake()

    def run_once(self) -> None:
        if not self._synced:
            if not self.source.wait_synced(self.sync_wait):
                raise TryAgainLater("NetworkPolicy: the Kubernetes cache has not listed yet; "
                                    "the rules in place stay as they are")
            self._synced = True
        self.debounce.wait()  # a burst of events (a rollout) becomes one apply
        try:
            self.apply_all()
        finally:
            self.debounce.done()

    def apply_all(self, force: bool = False) -> None:
        """Compiles every local attachment's rules and gives them to every renderer: when they
        differ from the last apply's, or `force`, or the last forced one is `resync` seconds
        old (what someone changed behind the agent's back, a restarted VPP). The compile runs
        outside the lock, so an ADD's `admit` waits only for the renderers' part."""
        while True:
            version = self._version
            plan = self._plan()
            with self._lock:
                if version != self._version:
                    continue  # an ADD or DEL came in between: plan again with it
                desired, warnings = plan
                now = time.monotonic()
                force = force or self._changed_dataplane or \
                    now - self._forced >= self.loop.interval
                if not force and desired == self._last:
                    return  # a change elsewhere in the cluster that changes nothing here
                for renderer in self.renderers:
                    renderer.apply(desired)
                self._installed = {k: e for k, e in desired.items() if not is_scheduled(k)}
                self._last = desired
                if force:
                    self._forced, self._changed_dataplane = now, False
                self._warnings = warnings
                self.applies += 1
                self.last_apply = time.time()
                return

    def _plan(self) -> tuple[dict[AttachmentKey, Enforced], tuple[str, ...]]:
        """What the renderers should hold: the records' attachments, plus those admitted by an
        ADD whose record is not committed yet (a full apply must not take their rules away)."""
        records = [r for r in self._records() if record_pod(r) is not None]
        known = {r.key for r in records}
        with self._lock:
            for key in [k for k in self._admitted if k in known]:
                del self._admitted[key]
            records += list(self._admitted.values())
        local = {record_pod(r) for r in records}
        compiled = self._compile(records, local, scheduled=True)
        desired: dict[AttachmentKey, Enforced] = {}
        for record in records:
            enforced = self._enforced(record, compiled)
            if enforced is not None:
                desired[record.key] = enforced
        for pod in sorted(compiled.pods.keys() - local):  # scheduled here, not attached yet
            desired[scheduled_key(pod)] = Enforced(scheduled_key(pod), pod, compiled.pods[pod],
                                                   ())
        return desired, compiled.warnings

    # ---- the request path ------------------------------------------------------------------

    def admit(self, record: PodRecord, wiring: dict[str, Any] | None = None) -> None:
        """Installs one new attachment's rules (an ADD, before its pod side is configured;
        `wiring`: the driver's, as the record will hold it)."""
        key = record_pod(record)
        if key is None:
            return
        if not self._synced:
            if not self.source.wait_synced(self.sync_wait):
                raise TryAgainLater(
                    f"NetworkPolicy: the Kubernetes API has not been listed yet, so the "
                    f"isolation of pod {key.namespace}/{key.name} cannot be decided")
            self._synced = True
        if wiring is not None:
            record = replace(record, wiring=wiring)
        with self._lock:
            compiled = self._compile([record], {key}, add=True)
            enforced = self._enforced(record, compiled)
            if enforced is None:
                return
            for renderer in self.renderers:
                renderer.apply_one(enforced)
            self._installed[record.key] = enforced
            self._admitted[record.key] = record
            self._version += 1
            self._last = None

    def release(self, key: AttachmentKey) -> None:
        """Removes one attachment's rules (a DEL, or an ADD's undo); idempotent."""
        with self._lock:
            self._installed.pop(key, None)
            self._admitted.pop(key, None)
            self._version += 1
            self._last = None
            for renderer in self.renderers:
                renderer.remove_one(key)

    # ---- what is shown ---------------------------------------------------------------------

    def explain(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The rules in force for a pod of this node, with the policies each came from."""
        with self._lock:
            mine = [e for e in self._installed.values() if e.pod == K8sPod(namespace, name)]
        if not mine:
            return None
        return {"pod": f"{namespace}/{name}", "node": self.node, "attachments": [
            {"container_id": e.attachment.container_id, "ifname": e.attachment.ifname,
             "addresses": [str(a) for a in e.addresses],
             "exempt": [str(a) for a in e.policy.node_addresses],
             "ingress": _direction(e.policy.ingress), "egress": _direction(e.policy.egress)}
            for e in mine]}

    def counters(self) -> Counts:
        """Every renderer's counters, summed (in the VPP dataplane the node's nftables count
        the Service traffic that passes the node, VPP the rest)."""
        out = Counts()
        for renderer in self.renderers:
            out = out + renderer.counters()
        return out

    @property
    def warnings(self) -> tuple[str, ...]:
        return self._warnings

    def installed(self) -> int:
        with self._lock:
            return len(self._installed)

    # ---- compiling -------------------------------------------------------------------------

    def _compile(self, records: list[PodRecord], wanted: set[K8sPod | None],
                 add: bool = False, scheduled: bool = False) -> Compiled:
        """The rules of `wanted`'s pods: the cache's pods, this node's as its records say (a
        pod the cache lacks comes from one GET, or without labels when the API has none).
        `add`: `records` are an ADD's, the node's other pods as the last full compile had
        them; else they are all of the node's. `scheduled`: also the pods the cache has on
        this node without a record (not attached yet)."""
        local: dict[K8sPod, Pod] = {}
        for record in records:
            key = record_pod(record)
            assert key is not None
            pod = local.get(key) or self.source.pod(key.namespace, key.name)
            if pod is None:
                log.warning("NetworkPolicy: pod %s/%s is not in the Kubernetes API; compiled "
                            "without labels", key.namespace, key.name)
                pod = Pod(key.namespace, key.name)
            ips = tuple(dict.fromkeys((*local[key].ips, *record_addresses(record)))) \
                if key in local else record_addresses(record)
            local[key] = self._made_from(key, pod, ips)
        if add:
            local = {**self._local, **local}
        else:
            self._local = local
        only = {k for k in wanted if k is not None}
        return self._index.compile(self.source.pod_changes, local, self.source.namespaces(),
                                   self.source.policies().values(), sctp=self.sctp,
                                   node_addresses={self.node: self._node_addresses()},
                                   only=only, scheduled=scheduled)

    def _made_from(self, key: K8sPod, pod: Pod, ips: tuple[IPAddress, ...]) -> Pod:
        """The node's pod `key` for the compiler: `pod` with the record's addresses, on this
        node; the same object as last time when made from the same ones."""
        made = self._made.get(key)
        if made is None or made[0] is not pod or made[1] != ips:
            made = self._made[key] = (pod, ips, replace(pod, ips=ips, node=self.node,
                                                        host_network=False))
        return made[2]

    def _enforced(self, record: PodRecord, compiled: Compiled) -> Enforced | None:
        key = record_pod(record)
        found = compiled.pods.get(key) if key is not None else None
        if key is None or found is None:
            return None
        return Enforced(record.key, key, found, record_addresses(record), dict(record.wiring))


def _direction(rules: Any) -> dict[str, Any]:
    return {"isolated": rules.isolated, "rules": [
        {"peers": [str(n) for n in rule.peers],
         "ports": "all traffic" if rule.ports is None else [str(p) for p in rule.ports],
         "policies": list(rule.policies)} for rule in rules.rules]}

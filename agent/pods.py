"""The pod lifecycle: the ADD, DEL, CHECK and GC steps, serialized per attachment.

ADD is a sequence of steps, each pushing its inverse on an undo stack; when a step fails the
stack unwinds, so a failed ADD leaves no interface, route, address or record behind:

    1. allocate     addresses from the node pools      (undo: return them)
    2. record       record + allocation keys in etcd   (undo: delete both, one transaction)
    3. wire         dataplane host side + pod interface (undo: the driver's own steps)
    4. podside      addresses, neighbor, routes in the pod netns (removed with the interface)
    5. commit       record marked ready with its wiring

A record in state "adding" therefore means an ADD that never answered success; reconcile
treats it as garbage. Requests for one (container ID, ifname) run one at a time; different pods
run in parallel (agent/locks).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Protocol, TypeVar

from agent import failpoints, podside
from agent.dataplane import Dataplane, UndoStack
from agent.errors import CniError, InternalError, UnknownContainer
from agent.locks import KeyedLocks
from agent.metrics import Metrics
from agent.model import PodKey, PodNetwork, PodRecord, Wiring
from agent.pools import Pools
from agent.request import CniRequest

log = logging.getLogger(__name__)
T = TypeVar("T")


class PodStore(Protocol):
    """The part of agent/store the lifecycle uses (etcd in production)."""

    def put_pod(self, node_id: int, record: PodRecord) -> None: ...
    def update_pod(self, node_id: int, record: PodRecord) -> None: ...
    def delete_pod(self, node_id: int, key: PodKey) -> PodRecord | None: ...
    def get_pod(self, node_id: int, key: PodKey) -> PodRecord | None: ...
    def list_pods(self, node_id: int) -> list[PodRecord]: ...


class PodSide(Protocol):
    """Pod-namespace configuration (agent/podside in production)."""

    def configure(self, pod: PodNetwork, gateway_mac: str) -> str: ...
    def check(self, pod: PodNetwork, gateway_mac: str, pod_mac: str) -> list[str]: ...


class CheckFailed(CniError):
    """CHECK found the attachment different from what ADD created."""

    code = 103


@dataclass(frozen=True)
class GCReport:
    removed: list[str]
    errors: list[str]


class PodManager:
    """Runs CNI verbs against the store, the dataplane and the pod side."""

    def __init__(
        self,
        node_id: int,
        store: PodStore,
        dataplane: Dataplane,
        pools: Pools,
        mtu: int,
        metrics: Metrics | None = None,
        pod_side: PodSide = podside,
    ) -> None:
        self.node_id = node_id
        self.store = store
        self.dataplane = dataplane
        self.pools = pools
        self.mtu = mtu
        self.metrics = metrics or Metrics()
        self.locks = KeyedLocks()
        self.pod_side = pod_side

    # ---- ADD -------------------------------------------------------------------------------

    def add(self, req: CniRequest) -> PodRecord:
        with self.locks.hold(req.key):
            existing = self.store.get_pod(self.node_id, req.key)
            if existing is not None:
                if existing.state == "ready" and existing.netns == req.netns:
                    return existing  # a repeated ADD: answer what was recorded
                self.teardown(existing)
            stale = self._stale_sandbox(req)
            if stale is not None:
                with self.locks.hold(stale.key):
                    log.info("replacing stale sandbox %s of pod %s", stale.key, req.pod_name)
                    self.teardown(stale)
            return self._add_steps(req)

    def _add_steps(self, req: CniRequest) -> PodRecord:
        undo = UndoStack()
        try:
            addresses = self._phase("allocate", self.pools.allocate)
            undo.push("return addresses", lambda: self.pools.release(addresses))
            record = PodRecord(
                container_id=req.container_id,
                ifname=req.ifname,
                netns=req.netns,
                addresses=[str(a) for a in addresses],
                gateways=[str(g) for g in self.pools.gateways],
                pod_namespace=req.pod_namespace,
                pod_name=req.pod_name,
                pod_uid=req.pod_uid,
                cni_version=req.cni_version,
                mtu=self.mtu,
                created=time.time(),
            )
            # Pushed before the write: a write whose answer is lost (timeout, connection drop)
            # may still have committed, and deleting an absent record is a no-op.
            undo.push("delete record", lambda: self.store.delete_pod(self.node_id, req.key))
            self._phase("record", lambda: self.store.put_pod(self.node_id, record))
            pod = record.network()
            wiring = self._phase("wire", lambda: self.dataplane.attach(pod, undo))
            gateway_mac = wiring.gateway_mac
            pod_mac = self._phase("podside", lambda: self.pod_side.configure(pod, gateway_mac))
            record.wiring = asdict(
                Wiring(wiring.host_ifname, pod_mac, wiring.gateway_mac, wiring.extra)
            )
            record.state = "ready"
            self._phase("commit", lambda: self.store.update_pod(self.node_id, record))
            return record
        except BaseException as exc:
            failed = undo.unwind()
            if failed:
                log.error("ADD %s failed and could not undo everything: %s", req.key, failed)
            if isinstance(exc, CniError):
                raise
            raise InternalError(f"ADD failed unexpectedly: {type(exc).__name__}", str(exc)) from exc

    def _phase(self, name: str, step: Callable[[], T]) -> T:
        start = time.perf_counter()
        try:
            result = step()
        finally:
            self.metrics.phase(name, time.perf_counter() - start)
        failpoints.hit(f"add:{name}")
        return result

    def _stale_sandbox(self, req: CniRequest) -> PodRecord | None:
        """An older sandbox of the same pod (namespace/name, same ifname) left behind."""
        if not (req.pod_namespace and req.pod_name):
            return None
        for record in self.store.list_pods(self.node_id):
            if (
                record.pod_namespace == req.pod_namespace
                and record.pod_name == req.pod_name
                and record.ifname == req.ifname
                and record.container_id != req.container_id
                and (not req.pod_uid or not record.pod_uid or record.pod_uid == req.pod_uid)
            ):
                return record
        return None

    # ---- DEL -------------------------------------------------------------------------------

    def delete(self, req: CniRequest) -> None:
        """Idempotent: succeeds when the netns, the interface or the record is already gone."""
        with self.locks.hold(req.key):
            record = self.store.get_pod(self.node_id, req.key)
            if record is None:
                # Nothing recorded; still remove what a crashed ADD may have left (names are
                # derived from the key, so the driver can find them without a record).
                self.dataplane.detach(self._bare_network(req), None)
                return
            self.teardown(record)

    def teardown(self, record: PodRecord) -> None:
        wiring = Wiring(**record.wiring) if record.wiring else None
        self.dataplane.detach(record.network(), wiring)
        failpoints.hit("del:detach")
        self.store.delete_pod(self.node_id, record.key)
        failpoints.hit("del:delete")
        self.pools.release(record.addresses)
        failpoints.hit("del:release")

    def live_problems(self, record: PodRecord) -> list[str]:
        """What the dataplane and the pod netns lack compared with a ready record."""
        wiring = Wiring(**record.wiring)
        pod = record.network()
        return self.dataplane.check(pod, wiring) + self.pod_side.check(
            pod, wiring.gateway_mac, wiring.pod_mac
        )

    def _bare_network(self, req: CniRequest) -> PodNetwork:
        return PodNetwork(req.key, req.netns, (), (), self.mtu)

    # ---- CHECK -----------------------------------------------------------------------------

    def check(self, req: CniRequest) -> PodRecord:
        with self.locks.hold(req.key):
            record = self.store.get_pod(self.node_id, req.key)
            if record is None or record.state != "ready":
                raise UnknownContainer(f"no attachment {req.key} on this node")
            problems = self._problems(record, req)
            if problems:
                raise CheckFailed(f"attachment {req.key} differs from its ADD", "; ".join(problems))
            return record

    def _problems(self, record: PodRecord, req: CniRequest) -> list[str]:
        problems: list[str] = []
        if record.netns != req.netns:
            problems.append(f"netns is {req.netns!r}, ADD wired {record.netns!r}")
        problems += _prev_result_problems(req.config.get("prevResult"), record)
        return problems + self.live_problems(record)

    # ---- GC --------------------------------------------------------------------------------

    def gc(self, valid: Iterable[PodKey]) -> GCReport:
        """Tears down every attachment of this node not in the runtime's valid list."""
        keep = set(valid)
        removed: list[str] = []
        errors: list[str] = []
        for record in self.store.list_pods(self.node_id):
            if record.key in keep:
                continue
            try:
                with self.locks.hold(record.key):
                    current = self.store.get_pod(self.node_id, record.key)
                    if current is not None:
                        self.teardown(current)
                removed.append(str(record.key))
            except CniError as exc:
                errors.append(f"{record.key}: {exc}")
        return GCReport(removed, errors)

    def records(self) -> list[PodRecord]:
        return self.store.list_pods(self.node_id)


def _prev_result_problems(prev: object, record: PodRecord) -> list[str]:
    """CHECK's prevResult must list the addresses ADD gave this attachment."""
    if not isinstance(prev, dict):
        return []
    ips = prev.get("ips", [])
    listed = (
        {ip.get("address") for ip in ips if isinstance(ip, dict)}
        if isinstance(ips, list)
        else set()
    )
    return [f"prevResult lacks address {a}" for a in record.addresses if a not in listed]

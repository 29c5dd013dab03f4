"""One ADD's steps and their undo (the list is in agent/lifecycle/pods), run with the attachment's
lock held.

Every completed step pushes its inverse on an undo stack; a failure unwinds it newest first. The
first undo is the release of the addresses together with the record: a write whose answer was
lost may have been applied, so the record is deleted whatever etcd holds now, and when etcd does
not answer that either the undo is journaled like a DEL (agent/state/journal) with the addresses
kept reserved. Each step is timed (metrics) and ends at a failpoint (agent/infra/failpoints).

The pod's namespace comes opened and checked by the request (agent/linux/netns.PodNetns): its
cookie for the record, the veth peer's place for the driver and the pod side's socket all come
from that one open namespace.
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import TypeVar

from agent.dataplane.undo import UndoStack
from agent.infra import failpoints, logs
from agent.lifecycle.parts import Parts
from agent.linux.netns import PodNetns, using
from agent.model.errors import CniError, InternalError, IPAMFailure, TryAgainLater
from agent.model.pod import CniRequest, IPInterface, PodKey, PodRecord, Wiring
from ipam import Exhausted

log = logging.getLogger(__name__)
T = TypeVar("T")


def add_steps(m: Parts, req: CniRequest, netns: PodNetns) -> PodRecord:
    """Runs one ADD's steps (the attachment's lock held, `netns` the request's namespace of
    req.netns); on failure, undoes what was done."""
    undo = UndoStack()
    try:
        addresses = _phase(m, "allocate", lambda: _allocate(m))
        sent: list[PodRecord] = []  # the record, once its write is sent
        undo.push("release", lambda: _unwrite(m, req.key, addresses, sent))
        record = PodRecord(
            container_id=req.container_id,
            ifname=req.ifname,
            netns=req.netns,
            addresses=[str(a) for a in addresses],
            gateways=[str(g) for g in m.pools.gateways],
            pod_namespace=req.pod_namespace,
            pod_name=req.pod_name,
            pod_uid=req.pod_uid,
            cni_version=req.cni_version,
            mtu=m.mtu,
            created=time.time(),
            netns_inode=netns_identity(req.netns, netns),
        )
        sent.append(copy.deepcopy(record))
        _phase(m, "record", lambda: m.store.put_pod(m.node_id, record))
        pod = record.network()
        wiring = _phase(m, "wire", lambda: m.dataplane.attach(pod, undo, netns))
        gateway_mac = wiring.gateway_mac
        if m.policy is not None:  # before the pod has an address: isolated from its 1st packet
            policy = m.policy
            wired = asdict(Wiring(wiring.host_ifname, "", gateway_mac, wiring.extra))
            _phase(m, "policy", lambda: policy.admit(record, wired))
            undo.push("remove the pod's NetworkPolicy rules", lambda: policy.release(req.key))
        pod_mac = _phase(m, "podside", lambda: m.pod_side.configure(pod, gateway_mac, netns))
        written = copy.deepcopy(record)
        record.wiring = asdict(
            Wiring(wiring.host_ifname, pod_mac, wiring.gateway_mac, wiring.extra)
        )
        record.state = "ready"
        _phase(m, "commit", lambda: m.store.update_pod(m.node_id, record, written))
        return record
    except BaseException as exc:
        failed = undo.unwind()
        if failed:
            log.error("ADD %s failed and could not undo everything: %s", req.key, failed)
        if isinstance(exc, CniError):
            raise
        raise InternalError(f"ADD failed unexpectedly: {type(exc).__name__}", str(exc)) from exc

def _unwrite(
    m: Parts, key: PodKey, addresses: list[IPInterface], sent: list[PodRecord]
) -> None:
    """Undoes allocate and record of a failed ADD, last on its undo stack.

    A write whose answer was lost (a timeout, a dropped connection) may still have been
    applied, even the final "ready" one: the record is deleted whatever it holds now.
    When etcd does not answer that delete either, the outcome stays unknown: the undo is
    journaled like a DEL (the drainer settles it, an ADD or DEL of the key first) and the
    addresses stay reserved until then, so they are not handed out twice."""
    if sent:
        try:
            m.store.delete_pod(m.node_id, key)
        except TryAgainLater:
            if m.journal is None:
                raise  # the addresses stay reserved: etcd may hold them
            m.journal.add(key, sent[0])
            log.warning("ADD %s failed and etcd did not answer its undo: journaled", key)
            return
    m.pools.release(addresses)

def _allocate(m: Parts) -> list[IPInterface]:
    try:
        return m.pools.allocate()
    except Exhausted as exc:
        raise IPAMFailure("no free pod address on this node", str(exc)) from exc


def _phase(m: Parts, name: str, step: Callable[[], T]) -> T:
    start = time.perf_counter()
    try:
        with logs.bound(phase=name):
            result = step()
            log.debug("ADD phase %s done in %.1f ms", name, (time.perf_counter() - start) * 1000)
    finally:
        m.metrics.phase(name, time.perf_counter() - start)
    failpoints.hit(f"add:{name}")
    return result



def netns_identity(path: str, held: PodNetns | None = None) -> str:
    """`cookie:<n>`, the kernel's never-reused cookie of the network namespace at `path` (or
    `dev:inode` of its file on a kernel without cookies); "" when it cannot be read. `held`:
    the namespace of `path` as the request holds it open (read there, not opened again).

    A path alone does not name a namespace for ever: /proc/PID/ns/net points at another one once
    the PID is reused, and a bind-mount path can be reused by a new sandbox. The file's inode
    number is not enough either: the kernel hands a freed namespace's number to the next one."""
    try:
        with using(path, held) as netns:
            cookie = netns.cookie()
            if cookie is not None:
                return f"cookie:{cookie}"
            dev, inode = netns.inode()
    except (OSError, CniError):
        return ""
    return f"{dev}:{inode}"


def netns_matches(record: PodRecord, held: PodNetns | None = None) -> bool:
    """The record's netns path still names the namespace ADD wired (unknown inode: trusted).
    `held`: that path's namespace as the request holds it open."""
    if not record.netns_inode:
        return True
    if record.netns_inode.startswith("cookie:"):
        return netns_identity(record.netns, held) == record.netns_inode
    try:  # a record written before cookies: its namespace file's dev:inode
        st = os.stat(record.netns)
    except OSError:
        return False
    return f"{st.st_dev}:{st.st_ino}" == record.netns_inode

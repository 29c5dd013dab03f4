"""One DEL's steps (the verb's entry is agent/lifecycle/pods), run with the attachment's lock held:

    detach    the dataplane's half, then the pod's NetworkPolicy rules
    delete    the record and its allocation keys, in one etcd transaction
    release   the addresses go back to the node's allocator, the node's copy forgets the record

With etcd unreachable the pod is still detached and the release journaled (agent/state/journal):
the pod is gone at once, etcd and the allocator catch up when the journal is drained. Each step
ends at a failpoint (agent/infra/failpoints).
"""

from __future__ import annotations

import logging

from agent.infra import failpoints
from agent.lifecycle.parts import Parts
from agent.model.errors import TryAgainLater
from agent.model.pod import PodKey, PodNetwork, PodRecord, Wiring
from agent.state.journal import JournalUnwritable

log = logging.getLogger(__name__)


def teardown(m: Parts, record: PodRecord, journal_if_unreachable: bool = False) -> None:
    """Detaches the recorded pod, deletes its record and releases its addresses."""
    detach(m, record.key, record.netns, record)
    failpoints.hit("del:detach")
    try:
        m.store.delete_pod(m.node_id, record.key, known=record)
    except TryAgainLater as exc:
        if not (journal_if_unreachable and m.journal is not None):
            raise
        journal_release(m, record.key, record, exc)
        return
    m.known.forget(record.key)
    failpoints.hit("del:delete")
    m.pools.release(record.addresses)
    failpoints.hit("del:release")


def delete_offline(m: Parts, key: PodKey, netns: str, unreachable: TryAgainLater) -> None:
    """A DEL while etcd does not answer: detached from the node's copy of the record, the
    release journaled."""
    record = m.known.get(key)
    detach(m, key, netns, record)
    failpoints.hit("del:detach")
    journal_release(m, key, record, unreachable)


def detach(m: Parts, key: PodKey, netns: str, record: PodRecord | None) -> None:
    """The dataplane half of a DEL: from the record when there is one, else from the key
    alone (the drivers derive names and tags from it)."""
    if record is None:
        m.dataplane.detach(PodNetwork(key, netns, (), (), m.mtu), None)
    else:
        wiring = Wiring(**record.wiring) if record.wiring else None
        m.dataplane.detach(record.network(), wiring)
    if m.policy is not None:  # after the pod is cut off, before its IPs go back
        m.policy.release(key)


def journal_release(m: Parts, key: PodKey, record: PodRecord | None,
                    unreachable: TryAgainLater) -> None:
    """Journals the release of a detached attachment while etcd is unreachable. When the
    journal cannot be written either (StateDir full or read-only), the DEL fails with 11:
    the record stays known and the addresses reserved, and the runtime's retry of the DEL
    (idempotent: the dataplane is already torn down) finishes it."""
    assert m.journal is not None
    try:
        m.journal.add(key, record)
    except JournalUnwritable as exc:
        raise TryAgainLater(
            f"DEL of {key} cannot finish now: etcd is unreachable and the StateDir cannot "
            "journal the release (full or read-only); the pod is torn down, its addresses "
            "stay reserved until a retried DEL settles them",
            f"etcd: {unreachable}; {exc}",
        ) from exc
    m.known.forget(key)
    log.warning("etcd unreachable: DEL of %s journaled; released once etcd answers", key)


def drain_key(m: Parts, key: PodKey) -> None:
    """Settles one journaled DEL (lock held): the dataplane if the plugin journaled it,
    then the record and its allocation keys, then the addresses go back."""
    assert m.journal is not None
    entry = m.journal.get(key)
    if entry is None:
        return
    known = entry.record
    if not entry.detached:
        known = m.store.get_pod(m.node_id, key) or known
        detach(m, key, entry.netns, known)
    deleted = m.store.delete_pod(m.node_id, key, known=known)
    gone = deleted or known
    if gone is not None:
        m.pools.release(gone.addresses)
    m.known.forget(key)
    m.journal.remove(key)
    log.info("journaled DEL of %s settled", key)

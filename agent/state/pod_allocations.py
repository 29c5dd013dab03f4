"""Pod records and their IP allocations in etcd, per node, written together or not at all.

A pod record (`pods/<node ID>/<container ID>/<ifname>`) is written and deleted in the same
transaction as one allocation key per pod address (`ipam/<node ID>/<ip>`), so a writer killed at
any moment leaves the whole pod or nothing. The common ADD and DEL writes are one round trip each
(compare on the value last read or written); the general path re-reads and guards by mod
revisions, takes over allocation keys already the pod's own and names any other owner. Every
write is also guarded by this process's node ID binding (agent/state/id_bindings).
docs/etcd-keys.md describes the transactions.
"""

from __future__ import annotations

import ipaddress
import time
from typing import Any

from pyetcd import transactions as tx

from agent.model.errors import (
    InvalidConfig,
    IOFailure,
    IPAMFailure,
    TryAgainLater,
    UnknownContainer,
)
from agent.model.pod import PodKey, PodRecord, pod_label
from agent.state.etcd_client import EtcdClient
from agent.state.etcd_keys import EtcdKeys, dump, load
from agent.state.id_bindings import MAX_ROUNDS, NodeIdBindings


class PodAllocations:
    """The pod records and allocation keys of every node."""

    def __init__(self, etcd: EtcdClient, keys: EtcdKeys, ids: NodeIdBindings) -> None:
        self.etcd = etcd
        self.keys = keys
        self.ids = ids

    def put_pod(self, node_id: int, record: PodRecord) -> None:
        """Creates the record and one allocation key per address, all or nothing.

        One round trip when nothing is in the way (create-if-absent on every key); otherwise
        the general path reads what is there and either takes over keys already ours or names
        the other owner."""
        pod_key = self.keys.pod(node_id, record.key)
        ips = _ips(record.addresses, pod_key)
        compare = [tx.Version(pod_key) == 0, *self.ids.guards.get(node_id, ())]
        compare += [tx.Version(self.keys.allocation(node_id, ip)) == 0 for ip in ips]
        ops = [tx.Put(pod_key, dump(record.to_json_dict()))]
        ops += [self._alloc_put(node_id, ip, record, time.time()) for ip in ips]
        if not self.etcd.txn(f"create pod {record.key}", compare, ops):
            self._write_pod(node_id, record, must_exist=False)

    def update_pod(
        self, node_id: int, record: PodRecord, previous: PodRecord | None = None
    ) -> None:
        """Rewrites an existing record (and its allocations, should the addresses change).

        With `previous` (the record as this agent last wrote it) and the same addresses, this
        is one round trip: the new record replaces the old one only if the old one is still
        byte for byte `previous`, so its allocation keys are those put_pod wrote with it."""
        pod_key = self.keys.pod(node_id, record.key)
        if previous is not None and previous.addresses == record.addresses:
            compare = [tx.Value(pod_key) == dump(previous.to_json_dict())]
            compare += self.ids.guards.get(node_id, ())
            ops = [tx.Put(pod_key, dump(record.to_json_dict()))]
            if self.etcd.txn(f"update pod {record.key}", compare, ops):
                return
        self._write_pod(node_id, record, must_exist=True)

    def _write_pod(self, node_id: int, record: PodRecord, must_exist: bool) -> None:
        pod_key = self.keys.pod(node_id, record.key)
        ips = _ips(record.addresses, pod_key)
        for _ in range(MAX_ROUNDS):
            self.ids.check_held(node_id)
            old_raw, old_mod = self.etcd.get(pod_key)
            if old_raw is None and must_exist:
                raise UnknownContainer(f"no pod record for {record.key} on node {node_id}")
            compare = (
                [tx.Version(pod_key) == 0] if old_raw is None else [tx.Mod(pod_key) == old_mod]
            )
            compare += self.ids.guards.get(node_id, ())
            ops = [tx.Put(pod_key, dump(record.to_json_dict()))]
            for ip in ips:
                self._claim_ip(node_id, ip, record, compare, ops)
            if old_raw is not None:
                gone = set(_ips(_record(old_raw, pod_key).addresses, pod_key)) - set(ips)
                for ip in sorted(gone):
                    self._drop_ip(node_id, ip, record.key, compare, ops)
            if self.etcd.txn(f"write pod {record.key}", compare, ops):
                return
        raise TryAgainLater(f"could not write pod {record.key}", "concurrent writers")

    def _claim_ip(
        self, node_id: int, ip: str, record: PodRecord, compare: list[Any], ops: list[Any]
    ) -> None:
        """Adds create-if-absent (or still-ours) for one allocation key to a transaction."""
        key = self.keys.allocation(node_id, ip)
        raw, mod = self.etcd.get(key)
        since = time.time()
        if raw is None:
            compare.append(tx.Version(key) == 0)
        else:
            owner = load(raw, key)
            if (owner.get("container_id"), owner.get("ifname")) != (
                record.container_id,
                record.ifname,
            ):
                raise IPAMFailure(
                    f"{ip} is already allocated on node {node_id}", f"owner {_owner_text(owner)}"
                )
            compare.append(tx.Mod(key) == mod)
            since = float(owner.get("since", since))
        ops.append(self._alloc_put(node_id, ip, record, since))

    def _alloc_put(self, node_id: int, ip: str, record: PodRecord, since: float) -> Any:
        owner = {
            "container_id": record.container_id,
            "ifname": record.ifname,
            "pod_namespace": record.pod_namespace,
            "pod_name": record.pod_name,
            "since": since,
        }
        return tx.Put(self.keys.allocation(node_id, ip), dump(owner))

    def _drop_ip(
        self, node_id: int, ip: str, pod: PodKey, compare: list[Any], ops: list[Any]
    ) -> None:
        """Adds the deletion of one allocation key, if this pod owns it, to a transaction."""
        key = self.keys.allocation(node_id, ip)
        raw, mod = self.etcd.get(key)
        if raw is None:
            return
        owner = load(raw, key)
        if (owner.get("container_id"), owner.get("ifname")) == (pod.container_id, pod.ifname):
            compare.append(tx.Mod(key) == mod)
            ops.append(tx.Delete(key))

    def delete_pod(
        self, node_id: int, key: PodKey, known: PodRecord | None = None
    ) -> PodRecord | None:
        """Deletes the record and its allocations together; None if there was none.

        With `known` (the record as read a moment ago) this is one round trip: the record is
        deleted only if it is still byte for byte what was read, and its allocation keys with
        it (they are only ever written in the same transaction as the record that lists them).
        """
        pod_key = self.keys.pod(node_id, key)
        if known is not None:
            ips = _ips(known.addresses, pod_key)
            ops = [tx.Delete(pod_key)]
            ops += [tx.Delete(self.keys.allocation(node_id, ip)) for ip in ips]
            compare = [tx.Value(pod_key) == dump(known.to_json_dict())]
            if self.etcd.txn(f"delete pod {key}", compare, ops):
                return known
        for _ in range(MAX_ROUNDS):
            raw, mod = self.etcd.get(pod_key)
            if raw is None:
                return None
            record = _record(raw, pod_key)
            compare = [tx.Mod(pod_key) == mod]
            ops = [tx.Delete(pod_key)]
            for ip in _ips(record.addresses, pod_key):
                self._drop_ip(node_id, ip, key, compare, ops)
            if self.etcd.txn(f"delete pod {key}", compare, ops):
                return record
        raise TryAgainLater(f"could not delete pod {key}", "concurrent writers")

    def get_pod(self, node_id: int, key: PodKey) -> PodRecord | None:
        pod_key = self.keys.pod(node_id, key)
        raw, _mod = self.etcd.get(pod_key)
        return None if raw is None else _record(raw, pod_key)

    def list_pods(self, node_id: int) -> list[PodRecord]:
        return [_record(raw, key) for key, raw in self.etcd.get_prefix(self.keys.pods(node_id))]

    def list_allocations(self, node_id: int) -> dict[str, dict[str, Any]]:
        """IP -> {container_id, ifname, pod_namespace, pod_name, since}."""
        prefix = self.keys.allocations(node_id)
        return {key[len(prefix):]: load(raw, key) for key, raw in self.etcd.get_prefix(prefix)}


def _ips(addresses: list[str], where: str) -> list[str]:
    """Pod addresses (CIDR strings) -> bare IP strings, the allocation key suffix."""
    try:
        return [str(ipaddress.ip_interface(a).ip) for a in addresses]
    except ValueError as exc:
        raise InvalidConfig(f"bad pod address in {where}", str(exc)) from exc


def _record(raw: bytes, where: str) -> PodRecord:
    try:
        return PodRecord.from_json_dict(load(raw, where))
    except TypeError as exc:  # a required field missing
        raise IOFailure(f"corrupt pod record in etcd key {where}", str(exc)) from exc


def _owner_text(owner: dict[str, Any]) -> str:
    pod = pod_label(owner.get("pod_namespace", ""), owner.get("pod_name", ""))
    return f"{owner.get('container_id')}/{owner.get('ifname')} (pod {pod})"

"""An in-memory PodStore with etcd's semantics for what the lifecycle uses (unit-test fake).

Records and allocation keys change together, a put refuses an address another attachment owns,
delete is idempotent. Used where a test runs in a namespace that cannot reach a real etcd.
"""

from __future__ import annotations

import copy
import threading

from agent.model.errors import IPAMFailure, UnknownContainer
from agent.model.pod import PodKey, PodRecord


class MemoryStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pods: dict[tuple[int, PodKey], PodRecord] = {}
        self.allocations: dict[tuple[int, str], PodKey] = {}

    def put_pod(self, node_id: int, record: PodRecord) -> None:
        with self._lock:
            for address in record.addresses:
                owner = self.allocations.get((node_id, address))
                if owner is not None and owner != record.key:
                    raise IPAMFailure(f"{address} is already allocated", str(owner))
            for address in record.addresses:
                self.allocations[(node_id, address)] = record.key
            self.pods[(node_id, record.key)] = copy.deepcopy(record)

    def update_pod(
        self, node_id: int, record: PodRecord, previous: PodRecord | None = None
    ) -> None:
        if (node_id, record.key) not in self.pods:
            raise UnknownContainer(f"no pod record for {record.key}")
        self.put_pod(node_id, record)

    def delete_pod(
        self, node_id: int, key: PodKey, known: PodRecord | None = None
    ) -> PodRecord | None:
        with self._lock:
            record = self.pods.pop((node_id, key), None)
            if record is not None:
                for address in record.addresses:
                    if self.allocations.get((node_id, address)) == key:
                        del self.allocations[(node_id, address)]
            return record

    def get_pod(self, node_id: int, key: PodKey) -> PodRecord | None:
        with self._lock:
            record = self.pods.get((node_id, key))
            return copy.deepcopy(record) if record else None

    def list_pods(self, node_id: int) -> list[PodRecord]:
        with self._lock:
            return [copy.deepcopy(r) for (n, _), r in self.pods.items() if n == node_id]

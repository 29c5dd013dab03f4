"""The layout of the agent's etcd prefix: every key it reads or writes, and the value format.

docs/etcd-keys.md describes each key; this is the one place that spells them. Names, container
IDs and interface names are percent-encoded, so that no value reaches into another key's space.
Values are JSON objects, compact with sorted keys (`dump`), and a value that is no JSON object is
an I/O error naming its key (`load`).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from agent.model.errors import IOFailure
from agent.model.pod import PodKey


class EtcdKeys:
    """The keys under one prefix (it ends in "/")."""

    def __init__(self, prefix: str = "/vswitch-cni/") -> None:
        self.prefix = prefix if prefix.endswith("/") else prefix + "/"

    # ---- node IDs (cluster-wide) ------------------------------------------------------------

    def node_name(self, name: str) -> str:
        return f"{self.prefix}nodes/name/{quote(name, safe='')}"

    @property
    def node_names(self) -> str:
        return f"{self.prefix}nodes/name/"

    def node_id(self, node_id: int) -> str:
        return f"{self.node_ids}{node_id}"

    @property
    def node_ids(self) -> str:
        return f"{self.prefix}nodes/id/"

    def node_removed(self, name: str) -> str:
        """Written when an operator removes the node (node remove, agent.nodes release), deleted
        when the node joins again: a binding gone without it is data etcd lost."""
        return f"{self.prefix}nodes/removed/{quote(name, safe='')}"

    # ---- pods and their allocations (per node) ----------------------------------------------

    def pod(self, node_id: int, key: PodKey) -> str:
        return (
            f"{self.pods(node_id)}{quote(key.container_id, safe='')}/"
            f"{quote(key.ifname, safe='')}"
        )

    def pods(self, node_id: int) -> str:
        return f"{self.prefix}pods/{node_id}/"

    def allocation(self, node_id: int, ip: str) -> str:
        return f"{self.allocations(node_id)}{ip}"

    def allocations(self, node_id: int) -> str:
        return f"{self.prefix}ipam/{node_id}/"

    # ---- the node registry ------------------------------------------------------------------

    def entry(self, node_id: int) -> str:
        return f"{self.registry}{node_id}"

    @property
    def registry(self) -> str:
        return f"{self.prefix}registry/"

    def alive(self, node_id: int) -> str:
        return f"{self.prefix}alive/{node_id}"

    @property
    def ping(self) -> str:
        """Read (never written) to see whether etcd answers."""
        return f"{self.prefix}ping"


def prefix_end(prefix: str) -> bytes:
    """The end of the key range of `prefix` (exclusive), for a range delete."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1  # every prefix here ends in "/": the next byte is "0", never an overflow
    return bytes(raw)


def dump(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def load(raw: bytes | None, where: str) -> dict[str, Any]:
    """Decodes a stored JSON object; a corrupt value is an I/O error naming its key."""
    try:
        data = json.loads(raw or b"")
    except ValueError as exc:
        raise IOFailure(f"corrupt JSON in etcd key {where}", str(exc)) from exc
    if not isinstance(data, dict):
        raise IOFailure(f"corrupt value in etcd key {where}", "expected a JSON object")
    return data

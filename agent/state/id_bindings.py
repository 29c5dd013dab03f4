"""Node IDs in etcd: claimed, bound again, released and listed, cluster-wide.

A binding is two keys written together, `nodes/id/<id>` and `nodes/name/<name>` (the same
value), each create-if-absent, so no two nodes ever hold one ID and no node two. An operator's
removal leaves `nodes/removed/<name>` in the same transaction; a claim deletes it.

The bindings this process holds guard its pod writes (`guards`, `check_held`, used by
agent/state/pod_allocations): no address of a node ID that etcd gave another node (after a wipe
or a restore from a backup) is ever written as allocated here. A guard is built once, when its
binding is held, and read by every pod write.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, NamedTuple

from pyetcd import transactions as tx

from agent.model.errors import InvalidConfig, TryAgainLater
from agent.state.etcd_client import EtcdClient
from agent.state.etcd_keys import EtcdKeys, dump, load

MAX_ROUNDS = 1000  # compare-and-swap retries; each lost round means another writer progressed


class Binding(NamedTuple):
    """What `NodeIdBindings.bind` found: all false/empty means the binding holds (again)."""

    holder: str = ""  # another node holds the ID now
    rewritten: bool = False  # etcd had lost it: written again
    removed: bool = False  # deleted while etcd went forward: an operator removed this node


def removal_mark(keys: EtcdKeys, name: str, node_id: int) -> Any:
    """The put of the mark an operator's removal leaves, for its transaction."""
    return tx.Put(keys.node_removed(name), dump({"id": node_id, "at": time.time()}))


class NodeIdBindings:
    """The node ID keys, and the bindings this process holds."""

    def __init__(self, etcd: EtcdClient, keys: EtcdKeys) -> None:
        self.etcd = etcd
        self.keys = keys
        self._held: dict[int, bytes] = {}  # node ID -> its binding's value, as held here
        # node ID -> the compare that makes a pod write of it fail unless the binding held here
        # still holds (no entry when none is held: tests, tools)
        self.guards: dict[int, list[Any]] = {}
        self._taken: set[int] = set()  # held node IDs another node holds now (etcd lost data)

    def claim(self, node_name: str, max_id: int) -> int:
        """The node's ID: the one it holds already, else the smallest free one (1-based)."""
        if not node_name:
            raise InvalidConfig("node name is empty", "set NodeName (or the node's hostname)")
        name_key = self.keys.node_name(node_name)
        for _ in range(MAX_ROUNDS):
            raw, _mod = self.etcd.get(name_key)
            if raw is not None:
                node_id = _check_bound(node_name, int(load(raw, name_key)["id"]), max_id)
                self._hold_current(node_id)
                return node_id
            taken = self._taken_ids()
            node_id = next(i for i in itertools.count(1) if i not in taken)
            if node_id > max_id:
                raise InvalidConfig(
                    f"no free node ID for node {node_name}: all {max_id} IDs the IPAM config "
                    "allows are taken",
                    "release the IDs of removed nodes (python -m agent.nodes release) or "
                    "enlarge the subnets",
                )
            id_key = self.keys.node_id(node_id)
            value = dump({"name": node_name, "id": node_id, "since": time.time()})
            # create-if-absent on both keys: a lost race leaves nothing and we try again
            if self.etcd.txn(
                f"claim node ID {node_id}",
                [tx.Version(id_key) == 0, tx.Version(name_key) == 0],
                [tx.Put(id_key, value), tx.Put(name_key, value),
                 tx.Delete(self.keys.node_removed(node_name))],  # joined again
            ):
                self._hold_current(node_id)
                return node_id
        raise TryAgainLater(
            f"could not claim a node ID for {node_name}", f"lost {MAX_ROUNDS} races in a row"
        )

    def bind(self, node_name: str, node_id: int) -> Binding:
        """Makes sure `node_id` is bound to `node_name`, re-creating what etcd lost (etcd wiped,
        or restored from an old backup). Nothing is written when another node holds the ID now
        (`holder`), or when the binding this client held is gone and the node's removal mark
        is there: an operator removed the node (`removed`).

        The id key is create-if-absent, so a node that claimed the ID meanwhile keeps it; the
        name key is pointed (back) at `node_id`, guarded by its mod revision."""
        id_key, name_key = self.keys.node_id(node_id), self.keys.node_name(node_name)
        value = dump({"name": node_name, "id": node_id, "since": time.time()})
        for _ in range(MAX_ROUNDS):
            id_raw, id_mod = self.etcd.get(id_key)
            # Removed by an operator only when the removal left its mark: etcd's revision alone
            # cannot tell (a wiped etcd that other agents wrote to since is "ahead" again).
            if id_raw is None and node_id in self._held and node_id not in self._taken \
                    and self.removal_marked(node_name):
                return Binding(removed=True)
            holder = node_name if id_raw is None else str(load(id_raw, id_key).get("name"))
            if holder != node_name:
                self._taken.add(node_id)
                return Binding(holder=holder)
            self._taken.discard(node_id)
            name_raw, name_mod = self.etcd.get(name_key)
            named = None if name_raw is None else load(name_raw, name_key).get("id")
            if id_raw is not None and named == node_id:
                self._hold(node_id, id_raw)
                return Binding()
            if id_raw is None:
                compare, ops = [tx.Version(id_key) == 0], [tx.Put(id_key, value)]
            else:
                compare, ops = [tx.Mod(id_key) == id_mod], []
            compare.append(
                tx.Version(name_key) == 0 if name_raw is None else tx.Mod(name_key) == name_mod
            )
            ops.append(tx.Put(name_key, value if id_raw is None else id_raw))
            if self.etcd.txn(f"bind node ID {node_id} to {node_name}", compare, ops):
                self._hold(node_id, value if id_raw is None else id_raw)
                return Binding(rewritten=True)
        raise TryAgainLater(f"could not bind node ID {node_id} to {node_name}", "busy")

    def release(self, node_name: str) -> bool:
        """Frees the node's ID (explicit operator action); False if it held none."""
        name_key = self.keys.node_name(node_name)
        for _ in range(MAX_ROUNDS):
            raw, name_mod = self.etcd.get(name_key)
            if raw is None:
                return False
            node_id = int(load(raw, name_key)["id"])
            id_key = self.keys.node_id(node_id)
            id_raw, id_mod = self.etcd.get(id_key)
            compare = [tx.Mod(name_key) == name_mod]
            ops = [tx.Delete(name_key), removal_mark(self.keys, node_name, node_id)]
            if id_raw is not None and load(id_raw, id_key).get("name") == node_name:
                compare.append(tx.Mod(id_key) == id_mod)
                ops.append(tx.Delete(id_key))
            if self.etcd.txn(f"release node ID of {node_name}", compare, ops):
                return True
        raise TryAgainLater(f"could not release the node ID of {node_name}", "busy")

    def by_name(self) -> dict[str, int]:
        """Node name -> node ID, for every node holding one."""
        out: dict[str, int] = {}
        for key, raw in self.etcd.get_prefix(self.keys.node_names):
            data = load(raw, key)
            out[str(data["name"])] = int(data["id"])
        return out

    def removal_marked(self, node_name: str) -> bool:
        """Whether an operator removed the node: the removal and `release` leave the mark in
        the same transaction, so a binding gone without it is data etcd lost."""
        return self.etcd.get(self.keys.node_removed(node_name))[0] is not None

    def _taken_ids(self) -> set[int]:
        prefix = self.keys.node_ids
        return {int(key[len(prefix):]) for key, _raw in self.etcd.get_prefix(prefix)}

    # ---- the bindings this process holds ----------------------------------------------------

    def _hold_current(self, node_id: int) -> None:
        """Holds the binding as etcd has it now."""
        self._hold(node_id, self.etcd.get(self.keys.node_id(node_id))[0])

    def _hold(self, node_id: int, value: bytes | None) -> None:
        """Notes the binding this process holds: every pod write for `node_id` from now on is
        guarded by it."""
        if value is not None:
            self._held[node_id] = value
            self.guards[node_id] = [tx.Value(self.keys.node_id(node_id)) == value]

    def check_held(self, node_id: int) -> None:
        """Raises TryAgainLater when the binding this process holds for `node_id` is gone or
        another node's now (a backup of this node's own older claim is taken as its own)."""
        value = self._held.get(node_id)
        if value is None:
            return
        key = self.keys.node_id(node_id)
        raw, _mod = self.etcd.get(key)
        if raw == value:
            return
        holder = None if raw is None else load(raw, key).get("name")
        if raw is not None and holder == load(value, key).get("name"):
            self._hold(node_id, raw)  # still this node's (a backup of its own older claim)
            return
        raise TryAgainLater(
            f"this node's ID {node_id} is no longer bound to it in etcd",
            f"held by {'nobody' if raw is None else f'node {holder}'} now "
            "(etcd wiped or restored from a backup?)",
        )


def _check_bound(node_name: str, node_id: int, max_id: int) -> int:
    if node_id > max_id:
        raise InvalidConfig(
            f"node {node_name} holds node ID {node_id}, above the {max_id} the IPAM config allows",
            "restore the old subnets, or release the ID (python -m agent.nodes release)",
        )
    return node_id

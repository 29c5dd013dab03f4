"""Removing a node from the cluster: an operator action, never an agent's own decision
(`vswitch-agent --config FILE node remove NAME [--force]`, agent/app/node_commands.py).

`remove` deletes the node's registry entry, its node ID (name and ID keys) and its pod records
and allocations in one etcd transaction; every other agent's mesh controller then sees the
registry entry go and removes the node's tunnel, FDB, neighbor and route entries. The freed ID
goes to the next new node. A node whose agent is alive (its liveness key is present: the agent
ran within the last ALIVE_TTL seconds) is refused unless `--force`: its agent would keep
serving pods whose records are gone.
"""

from __future__ import annotations

from agent.state.registry import ALIVE_TTL, Registry


class RemoveRefused(Exception):
    """The node cannot be removed as asked; the message says why and what to do."""


def remove_node(registry: Registry, name: str, force: bool = False) -> int:
    """Removes node `name`; returns its freed node ID. Raises RemoveRefused or CniError."""
    node_id = registry.node_id_of(name)
    held = node_id is not None
    if node_id is None:
        entries, _ = registry.entries()
        node_id = next((i for i, n in entries.items() if n.name == name), None)
    if node_id is None:
        raise RemoveRefused(f"node {name} is not in the cluster (no node ID, no registry entry)")
    if not force and registry.is_alive(node_id):
        raise RemoveRefused(
            f"node {name} (ID {node_id}) is live: its agent ran within the last {ALIVE_TTL}s; "
            "stop it first, or use --force"
        )
    if not registry.delete_node(name, node_id, name_held=held):
        raise RemoveRefused(f"node {name} changed while removing it (removed concurrently?)")
    return node_id

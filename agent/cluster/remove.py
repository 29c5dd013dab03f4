"""Removing a node from the cluster: an operator action, never an agent's own decision.

    vswitch-agent --config FILE node remove NAME [--force]
    vswitch-agent --config FILE node list

`remove` deletes the node's registry entry, its node ID (name and ID keys) and its pod records
and allocations in one etcd transaction; every other agent's mesh controller then sees the
registry entry go and removes the node's tunnel, FDB, neighbor and route entries. The freed ID
goes to the next new node. A node whose agent is alive (its liveness key is present: the agent
ran within the last ALIVE_TTL seconds) is refused unless `--force`: its agent would keep
serving pods whose records are gone.
"""

from __future__ import annotations

import argparse
import sys

from agent.cluster.registry import ALIVE_TTL, Registry
from agent.config import AgentConfig
from agent.errors import CniError


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


def node_command(config: AgentConfig, argv: list[str]) -> int:
    """`node remove NAME [--force]` / `node list`; returns the exit status."""
    parser = argparse.ArgumentParser(prog="vswitch-agent --config FILE node")
    sub = parser.add_subparsers(dest="action", required=True)
    rm = sub.add_parser("remove", help="remove a node from the cluster")
    rm.add_argument("name")
    rm.add_argument("--force", action="store_true", help="also when its agent is live")
    sub.add_parser("list", help="the node registry")
    args = parser.parse_args(argv)
    registry = Registry(list(config.etcd_endpoints), config.etcd_prefix, config.etcd_timeout,
                        config.etcd_tls)
    try:
        if args.action == "list":
            entries, _ = registry.entries()
            for node_id, info in sorted(entries.items()):
                alive = "live" if registry.is_alive(node_id) else "down"
                print(f"{node_id}\t{info.name}\t{info.node_ip}\t{alive}")
            return 0
        node_id = remove_node(registry, args.name, args.force)
        print(f"removed node {args.name} (ID {node_id} is free again)")
        return 0
    except RemoveRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    except CniError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    finally:
        registry.close()

"""The operator's node commands, on the agent's config:

    vswitch-agent --config FILE node remove NAME [--force]   a gone node out of the cluster
    vswitch-agent --config FILE node list                   the node registry
    python -m agent.nodes release|list (--etcd URL | --config FILE) [--node NAME]   node IDs

They run beside the agent, never inside it: removal is an operator's decision (agent/state/
node_removal), the node ID's rules are agent/state/node_ids'.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from agent.app.config import AgentConfig, ConfigError, check_etcd_tls, load
from agent.model.errors import CniError
from agent.state.node_ids import release
from agent.state.node_removal import RemoveRefused, remove_node
from agent.state.registry import Registry
from agent.state.store import Store


def node_command(config: AgentConfig, argv: list[str]) -> int:
    """`node remove NAME [--force]` / `node list`; returns the exit status."""
    parser = argparse.ArgumentParser(prog="vswitch-agent --config FILE node")
    sub = parser.add_subparsers(dest="action", required=True)
    rm = sub.add_parser("remove", help="remove a node from the cluster")
    rm.add_argument("name")
    rm.add_argument("--force", action="store_true", help="also when its agent is live")
    sub.add_parser("list", help="the node registry")
    args = parser.parse_args(argv)
    registry = Registry(Store(list(config.etcd_endpoints), config.etcd_prefix,
                              config.etcd_timeout, config.etcd_tls))
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agent.nodes",
                                     description="Node IDs of vswitch-cni in etcd.")
    parser.add_argument("command", choices=["release", "list"])
    parser.add_argument("--etcd", action="append", metavar="URL",
                        help="etcd endpoint, http://host:port (repeat for several)")
    parser.add_argument("--config", help="the agent's config file: its etcd endpoints, prefix, "
                                         "timeout and TLS files (instead of --etcd)")
    parser.add_argument("--node", help="node name (for release)")
    parser.add_argument("--prefix", default="/vswitch-cni/", help="the agent's etcd prefix")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds per etcd call")
    return parser


def _store(args: argparse.Namespace) -> Store:
    """The store of --config (endpoints, prefix, timeout, TLS) or of --etcd/--prefix."""
    if not args.config:
        return Store(args.etcd, args.prefix, args.timeout)
    cfg = load(args.config)
    check_etcd_tls(cfg)
    return Store(list(cfg.etcd_endpoints), cfg.etcd_prefix, cfg.etcd_timeout, cfg.etcd_tls)


def nodes_main(argv: Sequence[str] | None = None) -> int:
    """`python -m agent.nodes release|list`: node IDs in etcd; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "release" and not args.node:
        print("error: release needs --node NAME", file=sys.stderr)
        return 2
    if bool(args.etcd) == bool(args.config):
        print("error: give --etcd URL or --config FILE (one of them)", file=sys.stderr)
        return 2
    try:
        store = _store(args)
    except ConfigError as exc:
        print(f"error: bad config: {exc}", file=sys.stderr)
        return 2
    except CniError as exc:  # endpoints the store refuses
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        try:
            if args.command == "list":
                for name, node_id in sorted(store.node_ids().items(), key=lambda kv: kv[1]):
                    print(f"{node_id}\t{name}")
                return 0
            if release(store, args.node):
                print(f"released the node ID of {args.node}")
                return 0
            print(f"node {args.node} holds no node ID", file=sys.stderr)
            return 1
        finally:
            store.close()
    except CniError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3


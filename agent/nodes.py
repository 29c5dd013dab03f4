"""Node identity: the cluster-unique node ID, kept in etcd and reused by node name.

The ID fixes the node's subnets (ipam.node_networks), so it must survive agent restarts and is
never released when an agent stops: only an operator frees it, explicitly, once the node is gone:

    python -m agent.nodes release --etcd http://10.0.0.1:2379 --node worker-3
    python -m agent.nodes list --config /etc/vswitch-cni/agent.yaml   (its etcd, prefix, TLS)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from agent.backoff import retry_unavailable
from agent.config import ConfigError, check_etcd_tls, load
from agent.errors import CniError, TryAgainLater
from agent.store import Store
from ipam import IPAMConfig, max_node_id

log = logging.getLogger(__name__)


class NodeIdentity:
    """Claims (or finds again) this node's ID, within the bound the IPAM config allows.

    The ID is also remembered in `<state_dir>/node-id`: when etcd has lost the node's binding
    (wiped, restored from an old backup), the node takes its own ID back if it is still free,
    instead of the smallest free one, whose subnet is not the one its live pods use."""

    def __init__(
        self, store: Store, node_name: str, cfg: IPAMConfig, state_dir: str = ""
    ) -> None:
        self.store = store
        self.node_name = node_name
        self.cfg = cfg
        self.path = Path(state_dir, "node-id") if state_dir else None

    def _claim(self) -> int:
        remembered = self._remembered()
        if remembered and remembered <= max_node_id(self.cfg):
            found = self.store.bind_node_id(self.node_name, remembered)
            if not found.holder:
                if found.rewritten:
                    log.warning("etcd had lost node ID %d of %s: bound again", remembered,
                                self.node_name)
                return remembered
            log.error("node ID %d of %s (remembered in %s) is held by node %s in etcd now",
                      remembered, self.node_name, self.path, found.holder)
        node_id = self.store.claim_node_id(self.node_name, max_node_id(self.cfg))
        self._remember(node_id)
        return node_id

    def _remembered(self) -> int:
        try:
            return int(self.path.read_text().strip()) if self.path else 0
        except (OSError, ValueError):
            return 0

    def _remember(self, node_id: int) -> None:
        if self.path is None or self._remembered() == node_id:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{node_id}\n")
        os.replace(tmp, self.path)

    def acquire(
        self,
        wait: float = 0.0,
        stopping: threading.Event | None = None,
        on_wait: Callable[[TryAgainLater], None] | None = None,
    ) -> int:
        """The node's ID: reused by name, else the smallest free one. Raises CniError.

        An unreachable etcd is retried for up to `wait` seconds (backoff 0.2 s to 2 s), so an
        agent starting together with etcd, or during a blip, does not give up at once; a set
        `stopping` ends the wait. `on_wait` hears each failure retried (the readiness reason)."""
        def waiting(exc: TryAgainLater, left: float) -> None:
            log.warning("etcd not reachable yet (%s); retrying for %.0fs more", exc, left)
            if on_wait is not None:
                on_wait(exc)

        return retry_unavailable(self._claim, wait, stopping, waiting)


def release(store: Store, node_name: str) -> bool:
    """Frees a removed node's ID; False if it held none."""
    return store.release_node_id(node_name)


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


def main(argv: Sequence[str] | None = None) -> int:
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


if __name__ == "__main__":
    sys.exit(main())

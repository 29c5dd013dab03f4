"""Node identity: the cluster-unique node ID, kept in etcd and reused by node name.

The ID fixes the node's subnets (ipam.node_networks), so it must survive agent restarts and is
never released when an agent stops: only an operator frees it, explicitly, once the node is gone:

    python -m agent.nodes release --etcd http://10.0.0.1:2379 --node worker-3
    python -m agent.nodes list --config /etc/vswitch-cni/agent.yaml   (its etcd, prefix, TLS)

(the command line: agent/app/node_commands).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from agent.infra.backoff import retry_unavailable
from agent.model.errors import TryAgainLater
from agent.state.store import Store
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

"""Where vswitchctl's facts come from: etcd (the agent's prefix) and each agent's REST endpoint.

Both translate their failures into one exception each, with a one-line message: `EtcdDown`
(no etcd member answered: exit 3) and `AgentDown` (an agent's REST did not answer: exit 4).
Nothing here writes, except `Cluster.remove_node`, which reuses the agent's own removal.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from agent.model.errors import CniError, EtcdTLSFailure, TryAgainLater
from agent.model.node import NodeInfo
from agent.model.pod import PodRecord
from agent.state.etcd_tls import EtcdTLS
from agent.state.node_removal import remove_node
from agent.state.registry import Registry
from agent.state.store import Store


class EtcdDown(Exception):
    """etcd did not answer (or answered with an error)."""


class AgentDown(Exception):
    """An agent's REST endpoint did not answer."""


class NotFound(Exception):
    """What was asked for does not exist (a pod, a node)."""


@dataclass(frozen=True)
class Node:
    """A node as etcd knows it: its ID, its registry entry (None before it published one) and
    whether its agent holds its liveness lease."""

    node_id: int
    name: str
    info: NodeInfo | None
    alive: bool


class Cluster:
    """The agent's etcd prefix, read through the agent's own Registry (one error table)."""

    def __init__(self, endpoints: list[str], prefix: str, timeout: float,
                 tls: EtcdTLS | None = None) -> None:
        self.endpoints = endpoints
        self._registry = Registry(Store(endpoints, prefix, timeout, tls))

    def _etcd(self, what: str, fn: Any) -> Any:
        try:
            return fn()
        except CniError as exc:
            if isinstance(exc, EtcdTLSFailure):  # the reason is the news: say it
                raise EtcdDown(f"etcd TLS failure at {', '.join(self.endpoints)} ({what}): "
                               f"{exc.details}") from exc
            kind = "unreachable" if isinstance(exc, TryAgainLater) else "failed"
            raise EtcdDown(f"etcd {kind} at {', '.join(self.endpoints)} ({what}): "
                           f"{exc.msg}") from exc

    def nodes(self) -> list[Node]:
        """Every node with an ID or a registry entry, by ID."""
        entries, _ = self._etcd("node registry", self._registry.entries)
        names: dict[str, int] = self._etcd("node IDs", self._registry.store.node_ids)
        by_id = {i: n for n, i in names.items()}
        out = []
        for node_id in sorted(set(by_id) | set(entries)):
            info = entries.get(node_id)
            name = by_id.get(node_id) or (info.name if info else "")
            alive = self._etcd("liveness", lambda i=node_id: self._registry.is_alive(i))
            out.append(Node(node_id, name, info, bool(alive)))
        return out

    def node(self, name: str) -> Node:
        for node in self.nodes():
            if node.name == name:
                return node
        raise NotFound(f"no node {name!r} in the cluster")

    def pods(self, node_id: int) -> list[PodRecord]:
        return list(self._etcd("pod records", lambda: self._registry.store.list_pods(node_id)))

    def allocations(self, node_id: int) -> dict[str, dict[str, Any]]:
        store = self._registry.store
        return dict(self._etcd("allocations", lambda: store.list_allocations(node_id)))

    def remove_node(self, name: str, force: bool) -> int:
        return int(self._etcd("node remove", lambda: remove_node(self._registry, name, force)))

    def close(self) -> None:
        self._registry.close()


class Agent:
    """One agent's REST endpoint (GET only, JSON)."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def get(self, path: str, missing: str = "") -> Any:
        """The decoded JSON answer. Raises AgentDown for anything else, except that a 404 whose
        error starts with `missing` (the agent's own "no such object") gives None: a 404 of
        something that is not an agent, or of a path the agent does not serve, is no answer."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            text = _error_text(exc)
            if exc.code == 404 and missing and text.startswith(missing):
                return None
            raise AgentDown(f"agent at {self.url} answered {exc.code} for {path}: "
                            f"{text}") from exc
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AgentDown(f"agent at {self.url} unreachable: {reason}") from exc

    def check(self, container_id: str, ifname: str) -> dict[str, Any] | None:
        """The agent's live check of one attachment; None when the agent has no such
        attachment (its 404 `no attachment ...`, docs/rest-api.md)."""
        quoted = urllib.parse.quote(container_id, safe="")
        query = urllib.parse.urlencode({"ifname": ifname})
        answer = self.get(f"/v1/pods/{quoted}/check?{query}", missing="no attachment ")
        return dict(answer) if answer is not None else None


def _error_text(exc: urllib.error.HTTPError) -> str:
    """The agent's JSON `error`, else the HTTP reason (one line, cut short)."""
    try:
        text = str(json.loads(exc.read()).get("error", exc.reason))
    except (ValueError, AttributeError, OSError):
        text = str(exc.reason)
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:197] + "..."


def agent_url(node: Node, default_port: int) -> str | None:
    """The node's agent REST URL from its registry entry (None: the node never published)."""
    if node.info is None:
        return None
    port = node.info.rest_port or default_port
    host = node.info.node_ip
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

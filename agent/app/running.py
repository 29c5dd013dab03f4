"""The running agent as its readers see it: what the REST view (rest_view.py) and the scrape-time
gauges (gauges.py) read of an `Agent`.

agent.py builds both readers and hands them the agent itself; they name this Protocol instead of
the Agent class, so that neither imports agent.py back and the app wing has no import circle
(pyproject.toml's acyclic contract; the Agent class meets it structurally, mypy checks that where
agent.py hands itself over).
"""

from __future__ import annotations

from typing import Any, Protocol

from agent.app.cluster_side import ClusterSide
from agent.app.config import AgentConfig
from agent.app.kube_side import KubeSide
from agent.dataplane import Dataplane
from agent.dataplane.vpp.heap import HeapWatch
from agent.infra.health import Probe
from agent.infra.metrics import Metrics
from agent.lifecycle.pods import PodManager
from agent.lifecycle.reconcile import ReconcileReport
from agent.state.store import Store
from ipam import NodeNetworks


class RunningAgent(Protocol):
    """Read-only (properties): the readers never set any of it. Most parts are None until
    `Agent.start()` has made them, and some are replaced as it goes (the reconcile report), so
    a reader keeps the agent and reads through it at each request or scrape, never a copy."""

    @property
    def config(self) -> AgentConfig: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def phase(self) -> str: ...  # what start() is doing: the readiness reason until ready
    @property
    def serving(self) -> bool: ...  # start() has finished and stop() has not begun
    @property
    def node_id(self) -> int: ...  # 0 until the node ID is claimed
    @property
    def networks(self) -> NodeNetworks | None: ...
    @property
    def dataplane(self) -> Dataplane | None: ...
    @property
    def vpp_heap(self) -> HeapWatch | None: ...  # Dataplane vpp: VPP's main heap, last read
    @property
    def etcd_probe(self) -> Probe: ...
    @property
    def view_store(self) -> Store: ...  # REST's own etcd client, never the CNI path's
    @property
    def pods(self) -> PodManager | None: ...
    @property
    def cluster(self) -> ClusterSide | None: ...  # None: no node IP (no node registry)
    @property
    def kube(self) -> KubeSide | None: ...  # None: no Kubernetes API (NetworkPolicy off)
    @property
    def report(self) -> ReconcileReport: ...  # the start-up reconcile's
    @property
    def repair_report(self) -> dict[str, Any]: ...  # the last repair after a reconnect

    def ready(self) -> tuple[bool, str]: ...
    def live(self) -> bool: ...
    def dataplane_up(self) -> tuple[bool, str]: ...

"""What the REST endpoint serves of the agent (agent/api/rest.RestSource): read-only views of
state the agent already holds; the etcd-backed views through REST's own client."""

from __future__ import annotations

from typing import Any

from agent.app.running import RunningAgent
from agent.lifecycle.pods import PodManager
from agent.model.errors import NotReady, TryAgainLater
from agent.model.pod import PodKey
from ipam import IPAMConfig, NodeNetworks


class AgentView:
    """The agent as agent/api/rest sees it."""

    def __init__(self, agent: RunningAgent) -> None:
        self.agent = agent

    @property
    def node_id(self) -> int:
        return self.agent.node_id

    @property
    def networks(self) -> NodeNetworks | None:
        return self.agent.networks

    def ready(self) -> tuple[bool, str]:
        return self.agent.ready()

    def live(self) -> bool:
        return self.agent.live()

    @property
    def node_name(self) -> str:
        return self.agent.config.node_name

    @property
    def node_ip(self) -> str:
        return self.agent.cluster.local.node_ip if self.agent.cluster else self.agent.config.node_ip

    @property
    def ipam_config(self) -> IPAMConfig:
        return self.agent.config.ipam

    # The two views read etcd (they show what etcd records, leaks included) through the REST
    # side's own client, in agent/api/httpd's slow lane: one at a time, a few a second.

    def allocations(self) -> dict[str, dict[str, Any]]:
        self._started()
        return self.agent.view_store.list_allocations(self.agent.node_id)

    def pod_records(self) -> list[dict[str, Any]]:
        self._started()
        return [r.to_json_dict() for r in self.agent.view_store.list_pods(self.agent.node_id)]

    def pool_usage(self) -> list[dict[str, object]]:
        return self._started().pools.usage()

    def _started(self) -> PodManager:
        """The pod manager, or TryAgainLater (REST 503) while start() has not made it yet."""
        if self.agent.pods is None:
            raise TryAgainLater(f"the agent is not serving pods yet ({self.agent.phase})")
        return self.agent.pods

    def metrics_text(self) -> str:
        return self.agent.metrics.render()

    def mesh_nodes(self) -> dict[str, Any]:
        if self.agent.cluster is None:
            reason = "it has no node IP" if self.agent.serving else "the agent is starting"
            raise NotReady(f"this node is not in the node registry: {reason}")
        return self.agent.cluster.snapshot()

    def check_pod(self, container_id: str, ifname: str) -> dict[str, Any] | None:
        """A live CHECK of one attachment for operators (read-only: nothing is repaired). It
        holds that one attachment's lock while it reads etcd and the dataplane (never half an
        ADD or DEL); the slow lane runs one at a time, a few a second."""
        return self._started().inspect(PodKey(container_id, ifname))

    def pod_policy(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The rules in force for a pod of this node (from memory: no API call)."""
        side = self.agent.kube
        if side is None:
            raise NotReady("NetworkPolicy is off on this node: no Kubernetes API configured")
        return side.controller.explain(namespace, name)

    def last_reconcile(self) -> dict[str, Any]:
        return {**self.agent.report.to_json(), "lastRepair": self.agent.repair_report or None}



"""Service translation in VPP (`ServiceTranslation: vpp`), built from the config: the
renderer (VPP's cnat plugin, agent/dataplane/vpp/cnat) on the driver's API connection, and the
controller between it and the Kubernetes cache (agent/clusterip)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agent.clusterip.controller import ClusterIPController, ServiceSource
from agent.dataplane.vpp.cnat import VppServices
from agent.model.pod import PodRecord
from ipam import NodeNetworks
from services.model import IPAddress


def clusterip_controller(kube: ServiceSource, dataplane: Any, node: str, networks: NodeNetworks,
                         records: Callable[[], list[PodRecord]],
                         node_ips: Callable[[], Iterable[IPAddress]] = tuple
                         ) -> ClusterIPController:
    """`dataplane`: the VPP driver (its connection is shared; its `ensure` sets cnat up);
    `node_ips`: the node's own addresses, where its pods reach NodePorts."""
    renderer = VppServices(dataplane.api, dataplane.ensure)

    def pod_interfaces() -> list[int]:
        return [int(r.wiring["extra"]["sw_if_index"]) for r in records()
                if "sw_if_index" in r.wiring.get("extra", {})]

    return ClusterIPController(kube, renderer, node, pod_interfaces,
                               families={s.version for s in networks.pod_subnets},
                               node_ips=node_ips)

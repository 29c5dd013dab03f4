"""The cluster side of one agent, built from the config: registry, liveness, mesh controller.

`ClusterSide.build` runs at start, after the node ID is known: it works out the node IP, checks
that the pod MTU fits the uplink (refusing to start otherwise), and `start()` then publishes the
node and follows the registry in background threads. Nothing here is on the request path.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from agent.cluster.controller import MeshController
from agent.cluster.node import NodeInfo, NodeInfoError, NoNodeIP, choose_node_ip, local_node
from agent.cluster.registry import Liveness, Registry
from agent.config import AgentConfig
from agent.dataplane.kernel_mesh import KernelMesh
from agent.errors import InvalidConfig
from ipam import NodeNetworks

log = logging.getLogger(__name__)


class ClusterSide:
    def __init__(self, registry: Registry, local: NodeInfo, controller: MeshController) -> None:
        self.registry = registry
        self.local = local
        self.controller = controller
        self.liveness = Liveness(registry, local.node_id)

    @classmethod
    def build(
        cls, cfg: AgentConfig, networks: NodeNetworks, env: Mapping[str, str] | None = None
    ) -> ClusterSide | None:
        """Raises InvalidConfig for a node IP that is no address or a pod MTU that cannot fit;
        None (the node stays out of the mesh, warned about) when there is no node IP at all."""
        try:
            node_ip = choose_node_ip(cfg.node_ip, os.environ if env is None else env, networks)
        except NoNodeIP as exc:
            log.warning("%s: this node is not published to the node registry", exc)
            return None
        except NodeInfoError as exc:
            raise InvalidConfig(str(exc), "set NodeIP, or NODE_IP in the environment") from exc
        if cfg.dataplane != "kernel":
            # The VPP mesh is not built yet: the node is published (others see it) but its
            # own dataplane stays unconnected; a remote node then shows as failed with why.
            log.warning("the node mesh is implemented for the kernel dataplane only")
        mesh = KernelMesh(cfg.mtu, cfg.vxlan_interface, cfg.vxlan_vni,
                          l2_interconnect=cfg.use_l2_interconnect)
        probe = local_node(cfg.node_name, node_ip, networks)
        mesh.check_mtu(probe)
        uplink = mesh.uplink(probe)
        if uplink is None:
            log.warning("node IP %s is on no interface here: no mesh to other nodes", node_ip)
        local = local_node(cfg.node_name, node_ip, networks, uplink.mac if uplink else "",
                           rest_port=cfg.http_host_port[1])
        registry = Registry(list(cfg.etcd_endpoints), cfg.etcd_prefix, cfg.etcd_timeout)
        dataplane: Any = mesh if cfg.dataplane == "kernel" else _NoMesh(cfg.dataplane)
        return cls(registry, local, MeshController(registry, local, dataplane))

    def start(self) -> None:
        self.liveness.start()
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()
        self.liveness.stop()
        self.registry.close()

    def snapshot(self) -> dict[str, Any]:
        return self.controller.snapshot()

    def removed(self) -> bool:
        """True once an operator removed this node from the cluster while its agent ran."""
        return self.controller.removed.is_set()


class _NoMesh:
    """A dataplane without mesh support: every remote node fails with the reason."""

    def __init__(self, name: str) -> None:
        self.name = name

    def check_mtu(self, local: NodeInfo) -> None:
        pass

    def program(self, local: NodeInfo, remote: NodeInfo) -> None:
        raise NotImplementedError(f"the {self.name} dataplane has no node mesh yet")

    def unprogram(self, local: NodeInfo, remote: NodeInfo, keep: list[NodeInfo]) -> list[str]:
        return []

    def prune(self, local: NodeInfo, keep: list[NodeInfo]) -> list[str]:
        return []

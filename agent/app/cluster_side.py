"""The cluster side of one agent, built from the config: registry, liveness, mesh controller.

`ClusterSide.build` runs at start, after the node ID is known: it works out the node IP, checks
that the pod MTU fits the uplink (refusing to start otherwise), and `start()` then publishes the
node and follows the registry in background threads. Nothing here is on the request path.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import sys
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.app.config import AgentConfig, unusable_node_ip
from agent.cluster.controller import MeshController
from agent.dataplane.kernel_mesh import KernelMesh
from agent.dataplane.wireguard_mesh import PermissiveMesh, WireGuardMesh
from agent.linux.wireguard import Device, KeyFile
from agent.model.errors import InvalidConfig
from agent.model.node import NodeInfo, NodeInfoError, NoNodeIP, choose_node_ip, local_node
from agent.state.registry import Liveness, Registry
from agent.state.store import Store
from ipam import NodeNetworks

if TYPE_CHECKING:
    from agent.dataplane.vpp.node_mesh import VppNodeMesh, VppPermissive
    from agent.dataplane.vpp.wireguard import VppWireGuard

log = logging.getLogger(__name__)


class ClusterSide:
    def __init__(self, registry: Registry, local: NodeInfo, controller: MeshController) -> None:
        self.registry = registry
        self.local = local
        self.controller = controller
        self.liveness = Liveness(registry, local.node_id)

    @classmethod
    def build(
        cls, cfg: AgentConfig, networks: NodeNetworks, dataplane: Any = None,
        env: Mapping[str, str] | None = None,
    ) -> ClusterSide | None:
        """Raises InvalidConfig for a node IP that is no address, cannot be reached (loopback,
        multicast, ...) or, given as NodeIP or NODE_IP, is on none of this node's interfaces,
        and for a pod MTU that cannot fit; None (the node stays out of the mesh, warned about)
        when there is no node IP at all.
        `dataplane`: the pod dataplane (not started yet); the VPP mesh shares its connection."""
        env = os.environ if env is None else env
        try:
            node_ip = choose_node_ip(cfg.node_ip, env, networks)
        except NoNodeIP as exc:
            log.warning("%s: this node is not published to the node registry", exc)
            return None
        except NodeInfoError as exc:
            raise InvalidConfig(str(exc), "set NodeIP, or NODE_IP in the environment") from exc
        source = "NodeIP" if cfg.node_ip else "NODE_IP" if env.get("NODE_IP") else ""
        why = unusable_node_ip(ipaddress.ip_address(node_ip))
        if why:
            raise InvalidConfig(f"{source or 'the node IP'} {node_ip} {why}")
        mesh = _mesh(cfg, networks, dataplane)
        probe = local_node(cfg.node_name, node_ip, networks)
        mesh.check_mtu(probe)
        linux = (mesh if isinstance(mesh, KernelMesh | WireGuardMesh | PermissiveMesh)
                 else mesh.linux)
        uplink = linux.uplink(probe)
        if uplink is None and source:
            # Published, it would have every other node tunnel to an address nobody holds (a
            # typo, or one NodeIP in a config map all nodes share): refused, not warned about.
            raise InvalidConfig(
                f"{source} {node_ip} is on no interface of this node",
                "other nodes would send this node's traffic to it; give this node's own "
                "address (the DaemonSet sets NODE_IP from status.hostIP; a NodeIP in a config "
                "map that all nodes share is wrong on all but one)")
        if uplink is None:
            # The Contiv default (host number <node ID> of NodeInterconnectCIDR), no address
            # given: a single node, or one whose interconnect address comes later.
            log.warning("node IP %s (NodeInterconnectCIDR host %d) is on no interface here: no "
                        "mesh to other nodes until it is; set NodeIP or NODE_IP",
                        node_ip, networks.node_id)
        # REST's port is published only where other nodes can reach it: on the node IP (or on
        # every address); the default loopback bind is this node's own, so 0 (not published).
        ip = node_ip.split("/")[0]
        reachable = any(host in ("0.0.0.0", "::", ip) for host, _ in cfg.rest_binds)
        wg_key = ""
        wireguard = wireguard_of(mesh)
        if wireguard is not None:
            # The key (made on first start) and the device, here: a node that cannot encrypt
            # refuses to start, naming why (no wireguard-go, no wg), before it joins the mesh.
            wg_key = wireguard.key.ensure()
            if uplink is not None:
                wireguard.prepare(probe)
        local = local_node(cfg.node_name, node_ip, networks, uplink.mac if uplink else "",
                           rest_port=cfg.http_host_port[1] if reachable else 0,
                           wg_public_key=wg_key, wg_port=cfg.wireguard_port)
        # a store of its own: its own etcd connection (agent/state/registry)
        registry = Registry(Store(list(cfg.etcd_endpoints), cfg.etcd_prefix, cfg.etcd_timeout,
                                  cfg.etcd_tls))
        refresh = wireguard.refresh_local if wireguard is not None else None
        return cls(registry, local, MeshController(registry, local, mesh, refresh_local=refresh))

    def start(self) -> None:
        self.liveness.start()
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()
        self.liveness.stop()
        self.registry.close()

    def snapshot(self) -> dict[str, Any]:
        snap = self.controller.snapshot()
        view = self.wireguard_view()
        if view is not None:
            snap["wireguard"] = view
        return snap

    def wireguard_view(self) -> dict[str, Any] | None:
        """The WireGuard device as last read, peers named by node; None: no encryption."""
        wireguard = wireguard_of(self.controller.dataplane)
        if wireguard is None:
            return None
        return wireguard.view(self.controller.local, self.controller.nodes.items().values())

    def removed(self) -> bool:
        """True once an operator removed this node from the cluster while its agent ran."""
        return self.controller.removed.is_set()


def _mesh(
    cfg: AgentConfig, networks: NodeNetworks, dataplane: Any
) -> KernelMesh | WireGuardMesh | PermissiveMesh | VppNodeMesh:
    """The mesh of the configured dataplane: Linux's (VXLAN device, or routes alone with
    UseL2Interconnect; WireGuard with `Encryption`) for both dataplanes; with `VXLANOwner: vpp`,
    VPP's own VXLAN tunnels riding on Linux routes to the remote VPP-host subnets."""
    if cfg.dataplane == "kernel":
        return _linux_mesh(cfg)
    # Imported here: a kernel-dataplane agent never loads vpp-papi.
    from agent.dataplane.vpp import cnat_node
    from agent.dataplane.vpp.driver import VppDataplane
    from agent.dataplane.vpp.mesh import VppMesh
    from agent.dataplane.vpp.node_mesh import VppNodeMesh, VppPermissive
    from agent.dataplane.vpp.wireguard import VppWireGuard

    if not isinstance(dataplane, VppDataplane):
        raise TypeError(f"the {cfg.dataplane} mesh needs the VPP driver, got {dataplane!r}")
    # Whichever way is configured, VPP's own mesh objects are removed when not wanted (a node
    # switched from VXLANOwner vpp to linux keeps no tunnel or BVI beside Linux's device; one
    # switched to or from encryption keeps neither the tunnels nor the WireGuard interface).
    # With VPP translating Services, answers from another node's backends enter VPP through
    # the mesh's interface: cnat undoes the translation there.
    cnat = partial(cnat_node.enable, dataplane.api, table=cnat_node.TABLE_HOST) \
        if cfg.service_translation == "vpp" else None
    vxlan = VppMesh(dataplane.api, cfg.pod_vrf_id, cfg.main_vrf_id, cfg.ipam.vxlan_cidr,
                    cfg.vxlan_vni, on_interface=cnat)
    wireguard = VppWireGuard(dataplane.api, key_file(cfg), cfg.wireguard_port, cfg.pod_vrf_id,
                             cfg.main_vrf_id, cfg.mtu, on_interface=cnat)
    if not cfg.vxlan_in_vpp:
        return VppNodeMesh(dataplane, _linux_mesh(cfg), None, cfg.mtu, stale=(vxlan, wireguard))
    if cfg.main_vrf_id == cfg.pod_vrf_id:
        # The pod VRF routes remote VPP-host subnets into the tunnels, whose own packets (to
        # those subnets) are routed in the main VRF: one table would loop them.
        raise InvalidConfig(
            f"MainVRFID and PodVRFID are both {cfg.main_vrf_id}: VPP's VXLAN mesh needs two",
            "give PodVRFID another table ID (default 1), or set VXLANOwner: linux",
        )
    if cfg.encryption != "off":
        # Linux routes only the remote VPP-host subnets (where VPP's encrypted packets go); the
        # node's own traffic to remote pods goes into VPP, to be encrypted there.
        linux = KernelMesh(cfg.mtu, cfg.vxlan_interface, cfg.vxlan_vni, l2_interconnect=True,
                           route_vpp_host=True, route_pods=False)
        if cfg.encryption == "wireguard-permissive":
            return VppNodeMesh(dataplane, linux, VppPermissive(wireguard, vxlan), cfg.mtu)
        return VppNodeMesh(dataplane, linux, wireguard, cfg.mtu, stale=(vxlan,))
    linux = KernelMesh(cfg.mtu, cfg.vxlan_interface, cfg.vxlan_vni, l2_interconnect=True,
                       route_vpp_host=True)
    return VppNodeMesh(dataplane, linux, vxlan, cfg.mtu, stale=(wireguard,))


def _linux_mesh(cfg: AgentConfig) -> KernelMesh | WireGuardMesh | PermissiveMesh:
    """What carries pod traffic between nodes in the node's Linux: its VXLAN device (or routes
    alone with UseL2Interconnect), or with `Encryption` WireGuard (`wireguard-permissive`: both,
    WireGuard to the nodes that publish a key). With `Dataplane: vpp` VPP hands that traffic to
    Linux over the VPP-host interconnect."""
    if cfg.encryption == "off":
        return KernelMesh(cfg.mtu, cfg.vxlan_interface, cfg.vxlan_vni,
                          l2_interconnect=cfg.use_l2_interconnect,
                          stale_links=(cfg.wireguard_interface,))
    if cfg.use_l2_interconnect:
        log.warning("UseL2Interconnect is moot with Encryption: pod traffic between nodes goes "
                    "through WireGuard")
    device = Device(cfg.wireguard_interface, cfg.wireguard_port, key_file(cfg),
                    cfg.wireguard_implementation)
    plan = cfg.ipam
    catch_all = [str(c) for c in (plan.pod_subnet_cidr, plan.pod_subnet_v6_cidr,
                                  plan.vxlan_cidr) if c is not None]
    if cfg.encryption == "wireguard-permissive":
        return PermissiveMesh(WireGuardMesh(cfg.mtu, device, catch_all),
                              KernelMesh(cfg.mtu, cfg.vxlan_interface, cfg.vxlan_vni))
    return WireGuardMesh(cfg.mtu, device, catch_all, stale_links=(cfg.vxlan_interface,))


def key_file(cfg: AgentConfig) -> KeyFile:
    """This node's WireGuard key: one file in StateDir (made on first start)."""
    return KeyFile(Path(cfg.state_dir) / "wireguard.key")


def wireguard_of(
    mesh: object,
) -> WireGuardMesh | PermissiveMesh | VppWireGuard | VppPermissive | None:
    """The WireGuard mesh inside `mesh`: itself, a VPP node's Linux half, or VPP's own
    WireGuard; None: clear."""
    vpp = getattr(mesh, "vpp", None)
    loaded = sys.modules.get("agent.dataplane.vpp.node_mesh")  # a kernel agent never loads it
    if loaded is not None and isinstance(vpp, loaded.VppWireGuard | loaded.VppPermissive):
        found: VppWireGuard | VppPermissive = vpp
        return found
    linux = getattr(mesh, "linux", mesh)
    return linux if isinstance(linux, WireGuardMesh | PermissiveMesh) else None

"""`vswitch-agent --config FILE --teardown`: removes what the agent left on the node's network.

For a node that leaves the cluster or an uninstall: the agent keeps its host state across stops on
purpose (pods stay reachable while it restarts), so something must remove it once for good.
Removed, in the node's network namespace: the pods' host links the agent tagged (name with
HostInterfacePrefix, alias `vswitch-cni:...`; their host routes go with them), the kernel
dataplane's gateway interface (its pod-subnet route goes with it), the Linux end of the VPP
interconnect (with its routes to the pod subnets), the node mesh's VXLAN or WireGuard device (with
its routes to the other nodes; wireguard-go exits with its device), the agent's NAT table
(`NatTable`), a stale CNI socket, and with `Dataplane: vpp` the pods' interfaces and the driver's
base configuration in a VPP that still runs (interconnect, gateway loopback, routes; see
agent/dataplane/vpp/teardown.py), VPP's side of each link before the link. Refused while an agent
serves the socket. Not touched: etcd (the node's ID and records; `python -m agent.state.node_ids
release` frees the ID), the CNI files on the node (`python3 -m agent.install_cni --uninstall`), the
StateDir (with the node's WireGuard key).
"""

from __future__ import annotations

import contextlib
import os

from agent.app.agent import prepare_socket
from agent.app.config import AgentConfig
from agent.dataplane.kernel import OWNER_PREFIX
from agent.linux import hostnat, netlink
from agent.model.errors import CniError
from agent.state.store import Store


def teardown(cfg: AgentConfig) -> list[str]:
    """Removes the agent's host state; returns what it removed. Raises agent.app.StartupError
    when a live agent answers on the CNI socket (it still owns that state)."""
    socket_dir_existed = os.path.isdir(os.path.dirname(cfg.cni_socket))
    prepare_socket(cfg.cni_socket)  # raises on a live agent; removes a stale socket
    removed: list[str] = []
    if not socket_dir_existed:
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(cfg.cni_socket))
    if cfg.dataplane == "vpp":
        # VPP first: each pod's AF_PACKET interface before its veth (VPP must never poll a
        # socket whose device is gone; agent/dataplane/vpp/veth_afpacket.py).
        removed += _vpp_base(cfg)
    pod_links = netlink.links_with_alias_prefix(OWNER_PREFIX)
    for name in sorted(pod_links):
        if name.startswith(cfg.host_interface_prefix) and netlink.delete_link(name):
            removed.append(f"pod link {name} ({pod_links[name]})")
    for what, name in (("gateway interface", cfg.gateway_interface),
                       ("VPP interconnect", cfg.vpp_host_interface),
                       ("VXLAN device", cfg.vxlan_interface),
                       ("WireGuard device", cfg.wireguard_interface)):
        if netlink.delete_link(name):
            removed.append(f"{what} {name}")
    if hostnat.remove(cfg.nat_table):
        removed.append(f"NAT table inet {cfg.nat_table}")
    return removed


def _vpp_base(cfg: AgentConfig) -> list[str]:
    """The VPP driver's base objects, when VPP answers (a stopped VPP has none left)."""
    from agent.app.wiring import vpp_config
    from agent.dataplane.vpp import VppDataplane
    from ipam import ConfigError, node_networks

    store = Store(list(cfg.etcd_endpoints), cfg.etcd_prefix, cfg.etcd_timeout, cfg.etcd_tls)
    try:
        node_id = store.node_ids().get(cfg.node_name)
    except CniError as exc:
        return [f"VPP base configuration left: the node's ID is unknown ({exc})"]
    finally:
        store.close()
    if node_id is None:
        return ["VPP base configuration left: the node has no ID in etcd"]
    try:
        networks = node_networks(cfg.ipam, node_id)
    except ConfigError as exc:  # an ID this config's subnets cannot hold
        return [f"VPP base configuration left: {exc}"]
    dp = VppDataplane(vpp_config(cfg, networks))
    try:
        pods = []
        for name, tag in sorted(dp.owned().items()):  # the pods' interfaces, then their links
            dp.remove_orphan(name)
            pods.append(f"VPP: pod interface {name} ({tag}) and its link")
        return pods + [f"VPP: {what}" for what in dp.teardown()]
    except CniError as exc:
        return [f"VPP base configuration left: VPP is not reachable ({exc})"]
    finally:
        dp.close()


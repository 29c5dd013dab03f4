"""What the agent does with the Kubernetes API, built from the config: the cache (agent/kube),
NetworkPolicy (the renderers the dataplane needs and the controller between them and the cache,
agent/netpol), the collection of nodes deleted from the API (agent/cluster/node_gc) and, with
`ServiceTranslation: vpp`, ClusterIP translation in VPP (agent/clusterip, app/services_vpp).

The Kubernetes API is `KubeConfig` (a kubeconfig file) or, with that key unset, the pod's
service account when the agent runs in a pod (KUBERNETES_SERVICE_HOST, as the DaemonSet does).
With neither, NetworkPolicy is off and the agent says so once, as the demo and the tests run.

Renderers: the kernel dataplane's pods are judged by nftables in the node's forward hook; the
VPP dataplane's by VPP's ACLs on their interfaces, plus the same nftables for the Service
traffic that passes the node (after kube-proxy's DNAT, with the client pod's own address).
Both renderers keep state per pod; the controller works per attachment, so an adapter
(agent/netpol/perpod) merges a pod's attachments (a replaced sandbox is live beside the new one
for a moment).
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from agent.app.config import AgentConfig
from agent.cluster.node_gc import NodeCollector
from agent.clusterip.controller import ClusterIPController
from agent.infra.loops import SupervisedLoop
from agent.infra.metrics import Metrics
from agent.kube.api import KubeApi
from agent.kube.objects import NODES, KubeError, NodeError, node_from_k8s
from agent.kube.reflector import KubeState
from agent.linux.nftpolicy import NftPolicy, PodRules
from agent.model.errors import InvalidConfig
from agent.model.pod import PodRecord
from agent.netpol.controller import PolicyController
from agent.netpol.perpod import PerPod, merged_addresses
from agent.netpol.types import Counts, Enforced
from agent.state.registry import Registry
from ipam import NodeNetworks
from policy.model import IPAddress

log = logging.getLogger(__name__)

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_KINDS = ("services", "endpointslices")


def kube_config(cfg: AgentConfig, env: Mapping[str, str]) -> str | None:
    """The kubeconfig to use, "" for the pod's service account, None: no API (policy off)."""
    if cfg.kube_config:
        return cfg.kube_config
    if env.get("KUBERNETES_SERVICE_HOST") and os.path.exists(SERVICE_ACCOUNT):
        return ""
    return None


def api_node_ip(cfg: AgentConfig, env: Mapping[str, str]) -> str:
    """The node IP from the Kubernetes API when neither NodeIP nor NODE_IP gives one: the first
    InternalIP of this node's Node (one GET at start); "" when there is no API, no such Node or
    no InternalIP, or the GET fails (logged: the agent goes on as without an API)."""
    source = kube_config(cfg, env)
    if source is None or cfg.node_ip or env.get("NODE_IP"):
        return ""
    try:
        api = KubeApi(source or None)
        try:
            found = api.get(NODES.object_path("", cfg.node_name), timeout=5.0)
        finally:
            api.close()
        node = node_from_k8s(found) if found is not None else None
    except (KubeError, NodeError) as exc:
        log.warning("no node IP from the Kubernetes API: %s", exc)
        return ""
    if node is None or not node.internal_ips:
        log.warning("no node IP from the Kubernetes API: Node %s %s", cfg.node_name,
                    "does not exist" if node is None else "has no InternalIP")
        return ""
    log.info("node IP %s: the InternalIP of Node %s (neither NodeIP nor NODE_IP is set)",
             node.internal_ips[0], cfg.node_name)
    return str(node.internal_ips[0])


def node_addresses(networks: NodeNetworks, node_ip: str, dataplane: str) -> list[IPAddress]:
    """This node's own addresses as its pods see them: the node IP, the pods' gateways and, in
    the VPP dataplane, the Linux end of the VPP-host interconnect (the node's traffic into VPP,
    and a Service connection masqueraded there, come from it). The spec exempts them."""
    out: list[IPAddress] = list(networks.gateways)
    if node_ip:
        out.append(ipaddress.ip_address(node_ip.split("/")[0]))
    if dataplane == "vpp":
        out.append(networks.host_linux_ip.ip)
    return list(dict.fromkeys(out))


def nft_renderer(table: NftPolicy) -> PerPod:
    def merge(group: list[Enforced]) -> PodRules | None:
        return PodRules(group[-1].policy, merged_addresses(group)) if group else None

    def counters() -> Counts:
        c = table.counters()
        return Counts({p: (n.packets, n.bytes) for p, n in c.allowed.items()},
                      {(pod, d): (n.packets, n.bytes) for (pod, d), n in c.dropped.items()})

    return PerPod("nftables", True, table.apply, table.apply_pod, table.remove_pod, merge,
                  counters)


class KubeSide:
    """The Kubernetes cache, the NetworkPolicy controller, the node collector (once the node
    is in the registry), their metrics."""

    def __init__(self, kube: KubeState, controller: PolicyController,
                 table: NftPolicy | None = None,
                 clusterip: ClusterIPController | None = None) -> None:
        self.kube = kube
        self.controller = controller
        self.table = table
        self.clusterip = clusterip  # ServiceTranslation: vpp
        self.collector: SupervisedLoop | None = None

    @classmethod
    def build(cls, cfg: AgentConfig, networks: NodeNetworks, node_ip: str, dataplane: Any,
              records: Callable[[], list[PodRecord]], metrics: Metrics,
              env: Mapping[str, str] | None = None) -> KubeSide | None:
        """None (logged once) when there is no Kubernetes API to read."""
        source = kube_config(cfg, os.environ if env is None else env)
        translate = cfg.service_translation == "vpp"
        if source is None and translate:
            raise InvalidConfig("ServiceTranslation: vpp needs the Kubernetes API (its "
                                "Services and EndpointSlices)", "set KubeConfig, run the agent "
                                "in a pod with its service account, or use kube-proxy")
        if source is None:
            log.info("NetworkPolicy is off: no Kubernetes API (set KubeConfig, or run the agent "
                     "in a pod with its service account)")
            return None
        woken: list[PolicyController | ClusterIPController] = []  # the controllers made after

        def wake(kind: str) -> None:
            for controller in woken:  # NetworkPolicy reads no Service
                if isinstance(controller, ClusterIPController) or kind not in SERVICE_KINDS:
                    controller.changed(kind)

        try:
            kube = KubeState(source or None, registry=metrics.registry, services=translate,
                             on_change=wake)
        except KubeError as exc:  # an unreadable kubeconfig or service account: said, no trace
            where = f"KubeConfig {cfg.kube_config}" if source else "the pod's service account"
            raise InvalidConfig(f"cannot read the Kubernetes API's config from {where}: {exc}",
                                "fix KubeConfig, or remove it to run without NetworkPolicy"
                                ) from exc
        exempt = node_addresses(networks, node_ip, cfg.dataplane)
        vpp = cfg.dataplane == "vpp"
        # the conntrack sweep off the apply path: a change or an ADD never waits for it
        table = NftPolicy(cfg.nat_table, sweep_in_background=True, verify_in_background=True)
        renderers = [nft_renderer(table)]
        if vpp:
            from agent.app.policy_vpp import vpp_renderer  # the VPP side only when it runs

            renderers.append(vpp_renderer(dataplane, cfg.vpp_api_socket,
                                          [cfg.ipam.service_cidr], exempt,
                                          services_in_vpp=translate))
        controller = PolicyController(kube, renderers, cfg.node_name, lambda: exempt, records)
        woken.append(controller)
        clusterip = None
        if translate:
            from agent.app.services_vpp import clusterip_controller

            mine = [ipaddress.ip_address(node_ip.split("/")[0])] if node_ip else []

            def own_ips() -> list[IPAddress]:
                """Where this node's pods reach its NodePorts: its Node's InternalIPs and the
                agent's node IP."""
                found = kube.node(cfg.node_name)
                return list(dict.fromkeys([*(found.internal_ips if found else ()), *mine]))

            clusterip = clusterip_controller(kube, dataplane, cfg.node_name, networks, records,
                                             own_ips)
            woken.append(clusterip)
            log.info("Services translated by VPP's cnat plugin (ServiceTranslation: vpp): "
                     "ClusterIPs, this node's NodePorts, externalIPs, LoadBalancer IPs")
        elif vpp:
            log.warning("NetworkPolicy with Dataplane: vpp and ServiceTranslation: kube-proxy: "
                        "a pod's Service connection to a backend on another node arrives "
                        "there masqueraded to this node's address, and the backend's "
                        "NetworkPolicy judges that address (it allows it only through an "
                        "ipBlock); ServiceTranslation: vpp keeps the client pod's address")
        side = cls(kube, controller, table, clusterip)
        side._gauges(metrics)
        log.info("NetworkPolicy on: Kubernetes API %s, rendered by %s", kube.api.server,
                 ", ".join(r.name for r in renderers))
        return side

    def dataplane_changed(self) -> None:
        """VPP reconnected: its ACLs and translations are gone, repaired pods may have new
        interfaces."""
        self.controller.changed("dataplane")
        if self.clusterip is not None:
            self.clusterip.changed("dataplane")

    def collect_nodes(self, registry: Registry, local_name: str, grace: float) -> None:
        """Frees the registry entries of nodes deleted from the API (agent/cluster/node_gc)."""
        def pods_on(node: str) -> int:
            return sum(1 for pod in self.kube.pods().values() if pod.node == node)

        collector = NodeCollector(registry, local_name, lambda: self.kube.nodes().keys(),
                                  pods_on, lambda: self.kube.synced, grace=grace)
        self.collector = SupervisedLoop("node-gc", collector.run_once, min(30.0, grace or 1.0),
                                        log=log)

    def start(self) -> None:
        self.kube.start()
        self.controller.start()
        if self.clusterip is not None:
            self.clusterip.start()
        if self.collector is not None:
            self.collector.start()

    def stop(self) -> None:
        if self.collector is not None:
            self.collector.stop()
        self.controller.stop()
        if self.clusterip is not None:
            self.clusterip.stop()
        self.kube.stop()
        if self.table is not None:
            self.table.close()

    def _gauges(self, metrics: Metrics) -> None:
        def allowed(index: int) -> list[tuple[tuple[str], float]]:
            return [((p,), float(c[index])) for p, c in self.controller.counters().allowed.items()]

        def dropped(index: int) -> list[tuple[tuple[str, str, str], float]]:
            return [((pod.namespace, pod.name, d), float(c[index]))
                    for (pod, d), c in self.controller.counters().dropped.items()]

        for unit, index in (("packets", 0), ("bytes", 1)):
            metrics.labelled(f"vswitch_cni_policy_allowed_{unit}", f"{unit.title()} a "
                             "NetworkPolicy's rules allowed on this node (rules in place).",
                             ["policy"], partial(allowed, index))
            metrics.labelled(f"vswitch_cni_policy_dropped_{unit}", f"{unit.title()} dropped "
                             "because no rule allowed them, per isolated pod and direction.",
                             ["namespace", "pod", "direction"], partial(dropped, index))
        metrics.gauge("vswitch_cni_policy_pods", "Attachments with NetworkPolicy rules here.",
                      lambda: float(self.controller.installed()))
        metrics.gauge("vswitch_cni_policy_applies", "Full NetworkPolicy applies since start.",
                      lambda: float(self.controller.applies))

"""In-process "agents" for lifecycle tests: PodManagers on real pieces (etcd, the kernel dataplane
in this machine's namespace, a DEL journal in a temp dir), and the helpers their tests share.

`managers(...)` yields a factory of PodManagers for one node (same etcd prefix, gateway link,
host interface prefix and state dir, so a second one is that node's agent restarted) and removes
every link they made at the end, also when the test failed.
"""

from __future__ import annotations

import ipaddress
import secrets
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from agent.dataplane.kernel import KernelDataplane
from agent.lifecycle.pods import PodManager
from agent.model.pod import CniRequest
from agent.state.journal import DeleteJournal
from agent.state.store import Store
from ipam import IPAMConfig, NodeAllocator, node_networks


@contextmanager
def managers(
    etcd_endpoints: list[str], state_dir: Path, subnet: str, reap_delay: float = 0.0
) -> Iterator[Callable[[], PodManager]]:
    cfg, _ = IPAMConfig.from_mapping({"PodSubnetCIDR": subnet})
    networks = node_networks(cfg, 1)
    prefix = networks.pod_subnets[0].prefixlen
    gateways = [ipaddress.ip_interface(f"{networks.gateways[0]}/{prefix}")]
    suffix = secrets.token_hex(3)
    gw_ifname, host_prefix, etcd_prefix = f"vse{suffix}", f"e{suffix[:3]}", f"/down-{suffix}/"
    stores: list[Store] = []

    def make() -> PodManager:
        store = Store(etcd_endpoints, etcd_prefix, timeout=1.0)
        stores.append(store)
        dataplane = KernelDataplane(gateways, 1400, gw_ifname, host_prefix, reap_delay)
        dataplane.start()
        journal = DeleteJournal(state_dir / "pending-deletes")
        return PodManager(1, store, dataplane, NodeAllocator(networks), 1400, journal=journal)

    try:
        yield make
    finally:
        for store in stores:
            store.close()
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        for line in links.splitlines():
            name = line.split(":")[1].strip().split("@")[0]
            if name.startswith(host_prefix) or name == gw_ifname:
                subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)


def request(verb: str, netns: str, container_id: str, pod_name: str = "") -> CniRequest:
    """A request of pod ns/<pod_name or container_id>, no UID."""
    return CniRequest(
        verb=verb, cni_version="1.1.0", container_id=container_id, ifname="eth0", netns=netns,
        config={}, args={"K8S_POD_NAMESPACE": "ns", "K8S_POD_NAME": pod_name or container_id},
    )


def host_link(pods: PodManager, container_id: str) -> str:
    dp = pods.dataplane
    assert isinstance(dp, KernelDataplane)
    return dp.host_prefix + request("ADD", "/x", container_id).key.digest()


def link_live(name: str) -> bool:
    """A link `name` exists and is up. A DEL's host end goes down at once and is deleted in the
    background (agent/dataplane/undo): it may still exist a moment, down and unrouted."""
    out = subprocess.run(["ip", "-o", "link", "show", name], capture_output=True, text=True)
    flags = out.stdout.partition("<")[2].partition(">")[0].split(",")
    return out.returncode == 0 and "UP" in flags


def in_use(pods: PodManager) -> int:
    used = pods.pools.usage()[0]["inUse"]
    assert isinstance(used, int)
    return used

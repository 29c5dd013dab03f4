"""Nodes of the one-machine cluster (testbed/cluster.py) with `Dataplane: vpp`: one VPP per
node namespace, a fake one (tests/fakevpp, CI) or a real one (testbed/vpp_nodes.py: started by a
command of the machine's, named in the environment there).

`vpp_view` reads what a VPP holds for the mesh through the agent's own VPP modules (so the same
code inspects the fake and the real VPP): tunnels, bridge-domain FIB, BVI neighbors, pod-VRF
routes via the BVI; VPP's own WireGuard: its interface, peers and pod-VRF routes through it.
"""

from __future__ import annotations

import base64
import ipaddress

from agent.dataplane.vpp import interfaces, ip, neighbors
from agent.dataplane.vpp.api import VppApi
from agent.dataplane.vpp.mesh import BVI_TAG, VppMesh
from agent.dataplane.vpp.wireguard import WG_TAG
from testbed import vpp_nodes
from testbed.cluster import Cluster, Node, sh
from testbed.vpp_nodes import REAL_VPP
from tests.fakevpp import API_DIR, FakeVPP

POD_VRF, BD = 1, 10
__all__ = ["BD", "POD_VRF", "REAL_VPP", "VppNodes", "linux_routes", "naming", "vpp_view",
           "wireguard_view"]


class VppNodes(vpp_nodes.VppNodes):
    """testbed's VppNodes, with fake VPPs unless `real`."""

    def __init__(self, cluster: Cluster, real: bool) -> None:
        super().__init__(cluster)
        self.real = real
        self.fakes: dict[str, FakeVPP] = {}

    def launch(self, node: Node, name: str) -> tuple[str, str]:
        if self.real:
            return super().launch(node, name)
        socket = str(self.cluster.workdir / f"{name}.sock")
        fake = FakeVPP(socket, API_DIR, netns=f"/var/run/netns/{node.netns}")
        fake.start()
        self.fakes[name] = fake
        return socket, API_DIR

    def close(self) -> None:
        for fake in self.fakes.values():
            fake.stop()
        super().close()


def vpp_view(api: VppApi) -> dict[str, list[str]]:
    """What the VPP holds for the node mesh, as sorted text lines."""
    mesh = VppMesh(api, POD_VRF, 0, ipaddress.ip_network("192.168.30.0/24"), bd_id=BD)
    api.connect()
    bvi = interfaces.by_tag(api, BVI_TAG)
    out: dict[str, list[str]] = {
        "tunnels": sorted(f"{t.src} -> {t.dst} vni {t.vni} node {t.node_id}"
                          for t in mesh.tunnels()),
        "fib": sorted(str(e.mac) for e in api.dump("l2_fib_table_dump", bd_id=BD)
                      if not e.bvi_mac),
        "bvi": sorted(str(e.mac) for e in api.dump("l2_fib_table_dump", bd_id=BD)
                      if e.bvi_mac),
        "neigh": [], "routes": [],
    }
    out.update(wireguard_view(api))
    if bvi:
        index = bvi[0].sw_if_index
        out["neigh"] = sorted(f"{address} {mac}"
                              for (_, address), mac in neighbors.dump(api, index).items())
        out["routes"] = sorted(str(prefix) for ipv6 in (False, True)
                               for prefix, route in ip.routes(api, POD_VRF, ipv6).items()
                               if index in route.sw_if_indexes)
    return out


def wireguard_view(api: VppApi) -> dict[str, list[str]]:
    """VPP's own WireGuard: the interface ("port <port> src <address> key <public key>"), its
    peers ("peer <endpoint> port <port> keepalive <s> table <id> allowed <prefixes...> key
    <public key>") and the pod-VRF routes through it ("<prefix> via <next hop>"; not the
    route VPP holds for the interface's own address); with it, the main VRF's routes into the
    pod VRF ("wg_main": the node's own pod subnets, and the remote ones it sends to)."""
    tagged = {i.sw_if_index for i in interfaces.by_tag(api, WG_TAG)}
    out: dict[str, list[str]] = {"wg": [], "peers": [], "wg_routes": [], "wg_main": []}
    if not api.has("wireguard_interface_dump"):
        return out
    for d in api.dump("wireguard_interface_dump", show_private_key=False, sw_if_index=0xFFFFFFFF):
        i = d.interface
        if int(i.sw_if_index) in tagged:
            out["wg"].append(f"port {i.port} src {i.src_ip} "
                             f"key {base64.b64encode(bytes(i.public_key)).decode()}")
    for d in api.dump("wireguard_peers_dump", peer_index=0xFFFFFFFF):
        p = d.peer
        allowed = " ".join(sorted(str(a) for a in p.allowed_ips[:int(p.n_allowed_ips)]))
        out["peers"].append(f"peer {p.endpoint} port {p.port} keepalive {p.persistent_keepalive} "
                            f"table {p.table_id} allowed {allowed} "
                            f"key {base64.b64encode(bytes(p.public_key)).decode()}")
    out["peers"].sort()
    out["wg_routes"] = sorted(f"{prefix} via {' '.join(route.next_hops)}"
                              for ipv6 in (False, True)
                              for prefix, route in ip.routes(api, POD_VRF, ipv6).items()
                              if tagged & set(route.sw_if_indexes)
                              and prefix.prefixlen != prefix.max_prefixlen)  # its own address
    if tagged:
        out["wg_main"] = sorted(str(prefix) for ipv6 in (False, True)
                                for prefix, route in ip.routes(api, 0, ipv6).items()
                                if route.via_tables == (POD_VRF,) and route.types == (0,))
    return out


def linux_routes(node: Node) -> list[str]:
    """The node's kernel routes of the mesh (protocol 118), both families."""
    lines = []
    for family in ("-4", "-6"):
        out = sh("ip", "-n", node.netns, family, "route", "show", "proto", "118").stdout
        lines += [line.strip() for line in out.splitlines() if line.strip()]
    return sorted(lines)


def naming(lines: list[str], node: Node, node_id: int) -> list[str]:
    """The lines that name node `node_id` (node IP, VPP-host subnet or address, VXLAN address
    or MAC, IPv6 next hop, pod subnets, a tunnel to it)."""
    marks = {node.node_ip, f"172.30.{node_id}.0/24", f"172.30.{node_id}.1",
             f"192.168.30.{node_id}", f"12:2b:00:00:00:{node_id:02x}", f"fe80::2b:0:{node_id:x}",
             f"10.1.{node_id}.0/24", f"fd00:10:0:{node_id:x}::/64"}
    return [line for line in lines
            if marks & set(line.split()) or line.endswith(f" node {node_id}")]

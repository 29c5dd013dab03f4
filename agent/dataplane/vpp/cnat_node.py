"""What VPP's cnat plugin needs before a Service translation works on this node, and on each
pod interface (docs/vpp.md, "Services translated in VPP").

cnat translates on interfaces where its feature is enabled (`feature_cnat_enable_disable`:
its lookup and input nodes on ip4/ip6-unicast, its output and writeback nodes on
ip4/ip6-output). A pod's packet to a ClusterIP is translated as it enters VPP from the pod,
and its return session is made where it leaves VPP; the backend's reply is recognised as it
enters VPP from the backend's pod, or from the VPP-host interconnect when the backend is
another node's, and translated back on its way out to the client. So the feature goes on every
pod interface and on the interconnect (without it there, answers from other nodes' backends
were lost on a real 26.06).

Source NAT only for hairpin: a pod whose connection to a Service is sent to itself would see a
packet from its own address. cnat's "k8s" SNAT policy rewrites the source exactly then (and
when neither end is a pod interface, which does not happen here: the interconnect is in the
policy's host table, whose traffic is never rewritten). The hairpin address is the last usable
address of the node's pod subnet, per family: IPAM never hands it out (Contiv's NAT loopback).
The policy entry is set for forwarding in table 0 and made VPP's default (so it applies in the
pod VRF), with the pod VRF as its return table: the pod's answer enters from the pod VRF. cnat
wants FIB *indexes* there, which no API message gives: they are read from `show ip fib table N
summary` (cli_inband) and checked through `cnat_snat_addresses_dump`, which names their table IDs.

cnat counts sessions per VRF and initialises the count when an interface is bound to a table
after its first use; a VRF bound before (the gateway loopback, pods of an earlier agent) would
get no sessions at all. Binding a throw-away loopback to the pod VRF after the first cnat call
initialises it.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Iterable

from agent.dataplane.vpp import interfaces
from agent.dataplane.vpp.api import VppApi
from agent.model.errors import DataplaneFailure

log = logging.getLogger(__name__)

ANY = 0xFFFFFFFF
SNAT_POLICY_K8S = 2  # cnat_snat_policies: CNAT_POLICY_K8S
TABLE_POD, TABLE_HOST = 2, 3  # cnat_snat_policy_table: CNAT_POLICY_POD, CNAT_POLICY_HOST
USE_AS_DEFAULT = 4  # cnat_snat_policy_flags: CNAT_SNAT_POLICY_F_USE_AS_DEFAULT
# One of the feature nodes `feature_cnat_enable_disable` switches on together: enabling twice
# would put every node on the arcs twice, so the agent asks first.
PROBE_ARC, PROBE_FEATURE = "ip4-unicast", "cnat-input-ip4"
SCRATCH_MAC = "02:fe:c7:00:00:01"

Net = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def hairpin_address(subnet: Net) -> Address:
    """The source a pod sees on a connection it made to itself through a Service: the last
    usable address of the node's pod subnet (IPAM's reserved one)."""
    return subnet.broadcast_address - 1


def fib_indexes(api: VppApi, vrf_id: int, families: Iterable[int]) -> dict[int, int]:
    """{4 or 6: the FIB index of table `vrf_id`} from VPP's CLI (no API message has it)."""
    out = {}
    for version in families:
        command = f"show ip{'' if version == 4 else '6'} fib table {vrf_id} summary"
        text = str(api.call("cli_inband", cmd=command).reply)
        found = re.search(r"fib_index:(\d+)", text)  # "<table name>, fib_index:1, flow hash..."
        if found is None:
            raise DataplaneFailure(f"VPP has no IPv{version} table {vrf_id} to translate "
                                   "Services in", f"`{command}` did not list it")
        out[version] = int(found.group(1))
    return out


def setup(api: VppApi, pod_vrf_id: int, pod_subnets: Iterable[Net],
          host_sw_if_index: int | None) -> None:
    """The node's cnat configuration (once per VPP connection, after the base objects)."""
    subnets = {s.version: s for s in pod_subnets}
    indexes = fib_indexes(api, pod_vrf_id, sorted(subnets))
    for version, subnet in sorted(subnets.items()):
        address = hairpin_address(subnet)
        api.call("cnat_set_snat_addresses_v2", fwd_fib_index=0, ret_fib_index=indexes[version],
                 snat_ip4=str(address) if version == 4 else "0.0.0.0",
                 snat_ip6=str(address) if version == 6 else "::",
                 sw_if_index=ANY, flags=USE_AS_DEFAULT)
    for entry in api.dump("cnat_snat_addresses_dump"):
        tables = {4: int(entry.ret_table_id4), 6: int(entry.ret_table_id6)}
        wrong = [v for v in subnets if tables[v] != pod_vrf_id]
        if int(entry.fwd_table_id4) == 0 and wrong:
            raise DataplaneFailure("cnat's hairpin source NAT is not bound to the pod VRF",
                                   f"return tables {tables}, wanted {pod_vrf_id}")
    api.call("cnat_set_snat_policy", policy=SNAT_POLICY_K8S)
    _count_sessions_in(api, pod_vrf_id, subnets)
    if host_sw_if_index is not None:
        enable(api, host_sw_if_index, TABLE_HOST)
    log.info("cnat ready: hairpin source %s, pod VRF %d (FIB indexes %s)",
             ", ".join(str(hairpin_address(s)) for s in subnets.values()), pod_vrf_id, indexes)


def _count_sessions_in(api: VppApi, vrf_id: int, families: Iterable[int]) -> None:
    scratch = interfaces.create_loopback(api, SCRATCH_MAC)
    try:
        for version in families:
            interfaces.set_table(api, scratch, vrf_id, version == 6)
    finally:
        interfaces.delete_loopback(api, scratch)


def enable(api: VppApi, sw_if_index: int, table: int = TABLE_POD) -> None:
    """cnat on one interface (a pod's: TABLE_POD; the interconnect: TABLE_HOST); idempotent."""
    probe = api.call("feature_is_enabled", arc_name=PROBE_ARC, feature_name=PROBE_FEATURE,
                     sw_if_index=sw_if_index)
    if not probe.is_enabled:
        api.call("feature_cnat_enable_disable", sw_if_index=sw_if_index, enable_disable=True)
    api.call("cnat_snat_policy_add_del_if", sw_if_index=sw_if_index, is_add=1, table=table)

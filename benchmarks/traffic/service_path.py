"""TCP pod -> ClusterIP through VPP: VPP's cnat translation (`ServiceTranslation: vpp`) against
the kube-proxy detour (issue #25), side by side on one real VPP.

    python -m benchmarks run service-path --socket /run/vpp/api.sock [--seconds 5] [--runs 3]

Two veth + AF_PACKET pods wired by the VPP driver with cnat on, in the calling thread's
namespace (the node's: run it inside a namespace of its own, `ip netns exec NS`, when the VPP
runs there). Rows, each an iperf3 single TCP stream from pod a to pod b, interleaved `--runs`
times (medians; load that comes and goes hits every row):
- pod -> pod, straight through VPP (the reference);
- pod -> ClusterIP, kube-proxy's way: the packet leaves VPP for the node, a DNAT in a table of
  its own (testbed/service.py, what kube-proxy does) sends it back into VPP, and the agent's
  return-path masquerade (agent/linux/hostnat, `service_return`) brings the answer back the
  same way; the backend sees the node's address;
- pod -> ClusterIP, cnat: VPP translates it (agent/dataplane/vpp/cnat), the backend sees the
  client's address;
- pod -> pod again with cnat's feature off on both pods' interfaces (what cnat's per-flow
  sessions cost traffic that no Service translation concerns);
- and for the issue's target, the kernel dataplane's pod -> ClusterIP (the same DNAT on a node
  namespace of its own, testbed/pods' kernel driver).
What it makes (the pods' VRF 9, 10.247.1.0/24, the ClusterIPs 10.247.250.1-2, the interconnect
172.31.247.0/24, an nftables table of its own) is removed at the end, cnat's SNAT entry aside
(docs/vpp.md says why it stays).
"""

from __future__ import annotations

import argparse
import ipaddress
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

from agent.dataplane.undo import UndoStack
from agent.dataplane.vpp import VppConfig, VppDataplane
from agent.dataplane.vpp.cnat import VppServices
from agent.linux import hostnat, pod_netns
from benchmarks.core.netperf import IPERF_PORT, iperf
from services import Backend, Translation, TranslationKey
from testbed.netns import entered, named_netns, unique
from testbed.pods import Subnets, started_driver, vpp_pod, wire
from testbed.service import DnatService

PODS = ipaddress.ip_network("10.247.1.0/24")
KUBE_PROXY_VIP, CNAT_VIP = "10.247.250.1", "10.247.250.2"
ROWS = ("VPP: pod -> pod", "VPP: pod -> ClusterIP, kube-proxy detour",
        "VPP: pod -> ClusterIP, cnat in VPP")
KERNEL_ROW = "kernel dataplane: pod -> ClusterIP (DNAT on the node)"
PLAIN_ROW = "VPP: pod -> pod, cnat off on both interfaces"


def measure(socket: str, seconds: int, runs: int) -> dict[str, list[float]]:
    suffix = unique("")[-4:]
    dp = VppDataplane(VppConfig(
        api_socket=socket, pod_vrf_id=9, cnat=True,
        pod_gateways=(ipaddress.ip_interface(f"{PODS[1]}/24"),),
        vpp_host_ip=ipaddress.ip_interface("172.31.247.1/24"),
        host_linux_ip=ipaddress.ip_interface("172.31.247.2/24"),
        host_ifname=f"vsbs{suffix}h", host_vpp_ifname=f"vsbs{suffix}v"))
    table = f"vswbench{suffix}"
    services = VppServices(dp.api, dp.ensure)
    out: dict[str, list[float]] = {row: [] for row in ROWS}
    with ExitStack() as stack:
        dp.start()
        stack.callback(dp.close)
        stack.callback(dp.teardown)
        pods, interfaces = [], []
        for i in (10, 11):
            netns = stack.enter_context(named_netns("tbs"))
            pod = vpp_pod(netns, f"{PODS[i]}/32")
            wiring = dp.attach(pod, UndoStack())
            stack.callback(dp.detach, pod, wiring)
            pod_netns.configure(pod, wiring.gateway_mac)
            pods.append(pod)
            interfaces.append(int(wiring.extra["sw_if_index"]))
        a, b = pods
        backend = str(b.addresses[0].ip)
        subprocess.run(["sysctl", "-qw", "net.ipv4.ip_forward=1"], check=True)
        hostnat.apply(hostnat.NatPlan((PODS,), (PODS,), external=False, service_return=True,
                                      table=table))
        stack.callback(hostnat.remove, table)
        detour = DnatService(KUBE_PROXY_VIP, IPERF_PORT)
        stack.callback(detour.remove)
        detour.point_to(backend, IPERF_PORT, IPERF_PORT)
        key = TranslationKey(ipaddress.ip_address(CNAT_VIP), IPERF_PORT, "TCP")
        services.apply({key: Translation(key, (Backend(b.addresses[0].ip, IPERF_PORT),))})
        stack.callback(services.apply, {})
        kernel = stack.enter_context(_kernel_service())
        out[KERNEL_ROW], out[PLAIN_ROW] = [], []
        for _ in range(runs):
            for row, connect in zip(ROWS, ("", KUBE_PROXY_VIP, CNAT_VIP), strict=True):
                out[row].append(_gbps(iperf(a.netns, b.netns, backend, [], seconds,
                                            connect=connect)))
            out[KERNEL_ROW].append(kernel(seconds))
            _cnat(dp, interfaces, False)  # what cnat's per-flow sessions cost pod to pod
            try:
                out[PLAIN_ROW].append(_gbps(iperf(a.netns, b.netns, backend, [], seconds)))
            finally:
                _cnat(dp, interfaces, True)
    return out


def _cnat(dp: VppDataplane, interfaces: list[int], on: bool) -> None:
    for sw in interfaces:
        dp.api.call("feature_cnat_enable_disable", sw_if_index=sw, enable_disable=on)


def _gbps(result: dict[str, object]) -> float:
    return float(result["end"]["sum_received"]["bits_per_second"]) / 1e9  # type: ignore[index]


@contextmanager
def _kernel_service() -> Iterator[Callable[[int], float]]:
    """Two kernel-dataplane pods on a node namespace of their own, a DNAT to the second: yields
    one measurement of pod -> ClusterIP."""
    subnets = Subnets.pick()
    with named_netns("tbn") as node, entered(node), started_driver(node, subnets) as dp, \
            named_netns("tbp") as a, named_netns("tbp") as b:
        wire(dp, subnets.pod(a, 5, v6=False))
        wire(dp, subnets.pod(b, 6, v6=False))
        service = DnatService(KUBE_PROXY_VIP, IPERF_PORT, netns=node.rsplit("/", 1)[1])
        backend = str(subnets.v4[6])
        service.point_to(backend, IPERF_PORT, IPERF_PORT)
        try:
            yield lambda seconds: _gbps(iperf(a, b, backend, [], seconds,
                                              connect=KUBE_PROXY_VIP))
        finally:
            service.remove()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, help="the VPP API socket")
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    figures = measure(args.socket, args.seconds, args.runs)
    print(f"iperf3, one TCP stream for {args.seconds} s, {args.runs} runs interleaved "
          "(median, min-max, Gbit/s)")
    print("| path | TCP Gbit/s |")
    print("| --- | --- |")
    for row, values in figures.items():
        print(f"| {row} | {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Every benchmark of the suite, one entry each: its name (also its section's marker in
BENCHMARKS.md), the module that runs it, one line on what it answers, what it needs, the code it
measures (its subjects: a section is stale once they change) and its quick invocation.

The catalog names modules as strings and never imports them: the core sits below the rooms, and
`python -m benchmarks` imports only the one module a command runs.
"""

from __future__ import annotations

from dataclasses import dataclass

# The code every CNI figure runs through: the plugin, the agent's request path, its store and IPAM.
_CNI_PATH = ("cni_client", "agent/api", "agent/lifecycle", "agent/state", "ipam",
             "agent/dataplane/kernel.py", "agent/linux")
_VPP = ("agent/dataplane/vpp",)
VPP_ENV = "VSWITCH_TEST_VPP_SOCKET"  # a running VPP's API socket
KUBE_ENV = "VSWITCH_TEST_KUBE_APISERVER"  # a kube-apiserver v1.28 binary
_MESH = ("agent/cluster", "agent/dataplane/kernel_mesh.py")
_POLICY = ("policy", "agent/netpol", "agent/linux/nftpolicy", "agent/kube")


@dataclass(frozen=True)
class Benchmark:
    name: str
    room: str
    module: str  # run as `python -m MODULE ARGS`
    summary: str
    subjects: tuple[str, ...]
    quick: tuple[str, ...] | None  # the smoke run's arguments; None: no smoke run possible
    needs: str = ""  # beyond root, etcd and the reference plugins
    env: str = ""  # the environment variable that must name it (or the run is skipped)
    section: bool = True  # writes its own section of BENCHMARKS.md (and takes --out)
    in_suite: bool = True  # `run --all` runs it


CATALOG: tuple[Benchmark, ...] = (
    Benchmark("cni", "cni", "benchmarks.cni.suite",
              "ADD/CHECK/DEL through libcni against bridge+host-local, 16 runtimes at once, "
              "plugin exec, restart, node IDs, IPAM, a full node",
              _CNI_PATH + _VPP, ("--quick",)),
    Benchmark("add-path", "cni", "benchmarks.cni.add_path",
              "what one kernel ADD runs: modules, netns entries, in-process time",
              _CNI_PATH, ("--runs", "3")),
    Benchmark("rcu-add", "cni", "benchmarks.cni.rcu_add",
              "VPP ADD at 100+ live pods with the kernel's RCU grace periods normal and expedited",
              (*_CNI_PATH, *_VPP, "agent/linux/rcu.py"),
              ("--rounds", "1", "--live", "4", "--measured", "2", "--burst", "0", "--churn", "0"),
              needs="VPP", env=VPP_ENV),
    Benchmark("rest-flood", "cni", "benchmarks.cni.rest_flood",
              "ADDs while 500 REST clients flood the agent (printed, no section)",
              ("agent/api", "agent/app"), ("--quick",), section=False),
    Benchmark("traffic", "traffic", "benchmarks.traffic.one_node",
              "pod to pod on one node: bare veth, kernel dataplane, VPP's AF_PACKET variants",
              ("agent/dataplane",), ("--quick",)),
    Benchmark("mesh-traffic", "traffic", "benchmarks.traffic.mesh",
              "pod traffic with the node mesh on: same node, across nodes, ClusterIP, per setup",
              ("agent/dataplane", "agent/cluster", "agent/clusterip", "services"),
              ("--quick", "--setup", "kernel")),
    Benchmark("vpp-core", "traffic", "benchmarks.traffic.vpp_core",
              "pod traffic when VPP has a CPU of its own, Gbit/s per busy CPU beside the kernel",
              ("agent/dataplane", "agent/cluster", "agent/clusterip"),
              ("--quick", "--setup", "kernel")),
    Benchmark("encryption", "traffic", "benchmarks.traffic.encryption",
              "pod traffic across two nodes, WireGuard against clear: Gbit/s, RTT, per busy CPU",
              (*_MESH, "agent/dataplane/wireguard_mesh.py", "agent/linux/wireguard.py",
               "agent/dataplane/vpp/wireguard.py", "agent/dataplane/vpp/node_mesh.py"),
              ("--quick",)),
    Benchmark("vpp-livelock", "traffic", "benchmarks.traffic.vpp_livelock",
              "does VPP stop answering when N AF_PACKET interfaces hold frames at once",
              _VPP, ("--counts", "2", "--modes", "interrupt"), needs="VPP",
              env="VSWITCH_TEST_VPP_START"),  # it starts and stops VPPs itself
    Benchmark("udp-loss", "traffic", "benchmarks.traffic.udp_loss",
              "where UDP datagrams are lost on their way through VPP (printed, no section)",
              _VPP, ("--setup", "vpp-vxlan-in-linux", "--seconds", "1"), needs="VPP", env=VPP_ENV,
              section=False, in_suite=False),
    Benchmark("service-path", "traffic", "benchmarks.traffic.service_path",
              "pod to ClusterIP through VPP's cnat against the kube-proxy detour (printed)",
              (*_VPP, "agent/clusterip"), None, needs="VPP (--socket)", env=VPP_ENV, section=False,
              in_suite=False),
    Benchmark("policy-compile", "policy", "benchmarks.policy.compiler",
              "the policy compiler: 1,000 NetworkPolicies over 5,000 pods, in process",
              ("policy",), ("--pods", "200", "--policies", "20", "--runs", "1")),
    Benchmark("policy-kernel", "policy", "benchmarks.policy.kernel",
              "the nftables renderer at a full node: change times, peer join/leave, packet cost",
              ("policy", "agent/linux/nftpolicy"),
              ("--pods", "200", "--policies", "20", "--runs", "2")),
    Benchmark("policy-enforce", "policy", "benchmarks.policy.enforce",
              "API change to enforcement, ADD with policy on and off, per dataplane",
              _POLICY + _CNI_PATH,
              ("--changes", "3", "--live", "3", "--measured", "2", "--api-pods", "20",
               "--api-policies", "3", "--dataplanes", "kernel", "--seconds", "1",
               "--pings", "5"),
              needs="kube-apiserver", env=KUBE_ENV),
    Benchmark("policy-scale", "policy", "benchmarks.policy.scale",
              "one agent before a kube-apiserver holding a cluster of 5,000 nodes",
              _POLICY, ("--nodes", "5", "--pods", "300", "--policies", "10", "--services", "5",
                        "--local", "5", "--changes", "5", "--measured", "5", "--workers", "4",
                        "--rate", "10", "--churn", "15"),  # 300 pods: its churn needs team1-
              needs="kube-apiserver", env=KUBE_ENV, in_suite=False),
    Benchmark("soak", "soak", "benchmarks.soak.run",
              "pod churn for hours: slopes of memory, fds and latency, leak counts",
              _CNI_PATH + _VPP,
              ("--dataplane", "kernel", "--pods", "4", "--cycles", "20", "--window", "5"),
              in_suite=False),
    Benchmark("mesh-scale", "scale", "benchmarks.scale.mesh",
              "one agent programming a registry of 1,000 nodes: convergence, CPU, RSS",
              _MESH, ("--nodes", "20", "--events", "3")),
    Benchmark("api-load", "scale", "benchmarks.scale.apiserver",
              "what N agents' watches (N = 1, 10, 50) cost one kube-apiserver: CPU, bytes",
              ("agent/kube",), ("--nodes", "5", "--pods", "300", "--policies", "10",
                                "--services", "5", "--agents", "1,2", "--processes", "2",
                                "--rate", "5", "--seconds", "3"),
              needs="kube-apiserver", env=KUBE_ENV, in_suite=False),
    Benchmark("k8s-bench", "tests", "tests.k8s_tier.bench",
              "a real cluster: pod traffic and pod start-up (the k8s tier; `--write`)",
              ("agent", "cni_client", "k8s"), None, needs="the k8s tier's cluster",
              section=False, in_suite=False),
)


BY_NAME = {bench.name: bench for bench in CATALOG}


def find(name: str) -> Benchmark:
    if name not in BY_NAME:
        raise KeyError(f"no benchmark {name!r}; known: {', '.join(BY_NAME)}")
    return BY_NAME[name]

"""The CNI suite's node sections: an agent restart (reconcile), node-ID allocation, the IPAM core,
the agent's memory and a full node (ADD and DEL with 100+ live pods, VPP's split)."""

from __future__ import annotations

from benchmarks.cni.results import MB, Results, phase_table
from benchmarks.core.markdown import STAT_HEADER, fmt, md_table, stat_row
from benchmarks.core.stats import Summary


def restart_section(r: Results) -> list[str]:
    f = r.restart
    if f is None:
        return []
    out = [f"### 4. Reconcile after an agent restart ({f.pods} live pods)", "",
           f"The same node's agent restarted (SIGTERM, start) with {f.pods} pods in real "
           "namespaces; `reconcile` is the agent's own report (GET /v1/reconcile `seconds`), "
           "`exec to ready` the wall time from exec to the first /readiness 200 (polled every "
           "5 ms). With 0 pods the same restart shows the fixed start-up cost.", ""]
    rows = [
        stat_row(f"reconcile, {f.pods} pods", Summary.of(f.reconcile_loaded_s, "s"), 3),
        stat_row(f"exec to ready, {f.pods} pods", Summary.of(f.startup_loaded_s, "s"), 3),
        stat_row("reconcile, 0 pods", Summary.of(f.reconcile_empty_s, "s"), 3),
        stat_row("exec to ready, 0 pods", Summary.of(f.startup_empty_s, "s"), 3),
    ]
    out += md_table(STAT_HEADER, rows)
    per_pod = Summary.of(f.reconcile_loaded_s, "s").median / f.pods * 1000 if f.pods else 0.0
    out += [f"Reconcile per live pod: {fmt(per_pod, 2)} ms (median reconcile / pods); it reads "
            "every record from etcd, checks each pod's host side and pod namespace (netlink "
            "inside the namespace), and lists the dataplane's tagged objects.", ""]
    if f.netns_open_ms:
        s = Summary.of(f.netns_open_ms, "ms")
        out += ["For scale, measured here from Python on the same pods: opening a pyroute2 "
                "`IPRoute(netns=...)` into one pod namespace, listing its links and closing it "
                f"(what one per-pod check needs at least) takes median {fmt(s.median, 2)} ms "
                f"(min {fmt(s.min, 2)}, p99 {fmt(s.p99, 2)}, n = {s.n}); for {f.pods} pods that "
                f"is {fmt(s.median * f.pods / 1000, 2)} s if done one pod after another.", ""]
    if f.profile:
        out += [f"Profile: one more restart under cProfile (its reconcile took "
                f"{fmt(f.profiled_reconcile_s, 2)} s with the profiler's overhead). The heaviest "
                "functions below `reconcile()` by cumulative time (agent, pyroute2 and etcd "
                "client code; nested calls are counted in each of their callers):", ""]
        out += md_table(("function", "calls", "cumulative s", "ms per call"),
                      [[name, str(calls), fmt(cum, 3), fmt(cum / calls * 1000, 2) if calls else ""]
                       for name, calls, cum in f.profile])
    return out


def nodeid_section(r: Results) -> list[str]:
    if not r.nodeid:
        return []
    agents = r.nodeid[0].agents
    out = [f"### 5. Node-ID allocation: {agents} agents racing on a 3-member etcd", "",
           "Each simulated agent is a thread with its own etcd client calling "
           "`Store.claim_node_id` (smallest free ID, create-if-absent transaction) under a "
           "unique node name, spread over worker processes; all start at one signal. Settle = "
           "signal to the last claim returning. One race per run, a fresh key prefix each.", ""]
    rows = [stat_row("time to settle", Summary.of([x.settle_s for x in r.nodeid], "s"), 3),
            stat_row("one agent's claim (all runs)",
                      Summary.of([c for x in r.nodeid for c in x.claim_s], "s"), 3),
            stat_row("transactions per agent (1 = no lost race)",
                      Summary.of([x.attempts / x.agents for x in r.nodeid], "txn"), 1)]
    out += md_table(STAT_HEADER, rows)
    checks = [f"run {i + 1}: {'all unique' if x.unique else 'DUPLICATES'}, "
              f"{'IDs 1..' + str(x.agents) + ' without gaps' if x.dense else 'gaps in the IDs'}"
              f", {len(x.errors)} errors{': ' + x.errors[0] if x.errors else ''}"
              for i, x in enumerate(r.nodeid)]
    return [*out, "Checked from etcd afterwards: " + "; ".join(checks) + ".", ""]


def ipam_section(r: Results) -> list[str]:
    f = r.ipam
    if f is None:
        return []
    out = ["### 6. IPAM core (ipam.PodAllocator, pure) on a /16 node subnet", "",
           f"In process, no I/O. `fill`: allocate all {f.capacity} usable addresses of an empty "
           "/16. `churn`: the /16 kept 90% full, release a random address then allocate one. "
           "Memory by tracemalloc with the /16 full (measured apart from the timed runs).", ""]
    rows = [stat_row("fill /16", Summary.of(f.fill_per_s, "allocations/s"), 0),
            stat_row("churn at 90% full", Summary.of(f.churn_per_s, "operations/s"), 0)]
    out += md_table(STAT_HEADER, rows)
    out += md_table(("memory, /16 full", "value"), [
        ["retained by the allocator", f"{fmt(f.retained_bytes / MB, 2)} MB"],
        ["peak while filling", f"{fmt(f.peak_bytes / MB, 2)} MB"],
        ["per address in use", f"{fmt(f.retained_bytes / f.capacity, 1)} bytes"],
    ])
    return out


def memory_section(r: Results) -> list[str]:
    f = r.restart
    if f is None:
        return []
    out = ["### 7. Agent memory (VmRSS)", "",
           "VmRSS from /proc/PID/status of the agent process: just after it became ready with "
           f"0 pods (one value per start), right after {f.pods} ADDs in the same process, and "
           f"after each restart with {f.pods} live pods. For the floor: a bare interpreter that "
           "only imports the agent's modules.", ""]
    rows = [stat_row("agent, 0 pods", Summary.of([x / MB for x in f.rss_empty], "MB")),
            stat_row(f"agent, after {f.pods} ADDs",
                      Summary.of([x / MB for x in f.rss_after_adds], "MB")),
            stat_row(f"agent restarted with {f.pods} pods",
                      Summary.of([x / MB for x in f.rss_loaded], "MB")),
            stat_row("python importing the agent's modules only",
                      Summary.of([f.import_rss / MB], "MB"))]
    out += md_table(STAT_HEADER, rows)
    if f.pods:
        grow = (Summary.of(f.rss_after_adds, "B").median - Summary.of(f.rss_empty, "B").median)
        out += [f"Growth per pod after ADDs: {fmt(grow / f.pods / 1024, 1)} KiB "
                "(median after ADDs minus median at 0 pods, over the pods).", ""]
    return out


def scale_section(r: Results) -> list[str]:
    if not r.scale:
        return []
    live = next(iter(r.scale.values())).live
    out = [f"### 8. A full node: ADD and DEL with {live}+ live pods", "",
           f"Pods added one at a time through libcni and left in place; the ADDs made with at "
           f"least {live} pods up are the figure, then the DELs made with at least {live} still "
           "up. Memory: the drop of MemAvailable over the whole fill, per pod (the pod's veth, "
           "routes and, with VPP, its AF_PACKET rings and VPP's own growth; other processes on "
           "the machine add noise).", ""]
    rows = []
    for name, s in r.scale.items():
        rows.append(stat_row(f"ADD, {name} dataplane, {s.live}+ live pods", s.add))
        rows.append(stat_row(f"DEL, {name} dataplane, {s.live}+ live pods", s.delete))
    out += md_table(STAT_HEADER, rows)
    out += md_table(("dataplane", "MemAvailable drop per pod"),
                  [[name, f"{fmt(s.memory_mib_per_pod, 2)} MiB"] for name, s in r.scale.items()])
    out += _vpp_split(r)
    vpp = r.scale.get("vpp")
    if vpp is not None and vpp.ring_mib_per_interface is not None:
        out += [f"With the node full, VPP had {vpp.interfaces} AF_PACKET rings mapped (the "
                "pods' and the interconnect's), "
                f"{fmt(vpp.ring_mib_per_interface, 2)} MiB each on average: the Size of VPP's "
                "shared socket mappings in /proc/PID/smaps, which is the ring memory the kernel "
                "allocated (resident: VPP maps it whole)."
                + (f" The configured defaults give {fmt(r.vpp_ring_mib, 2)} MiB (receive + "
                   "transmit frames x frame size; `AfPacketRxFrames`, `AfPacketTxFrames`, "
                   "`AfPacketFrameSize`)." if r.vpp_ring_mib is not None else ""), ""]
    if vpp is not None:
        out += ["The VPP agent here has the defaults (the kernel's RCU grace periods as the "
                "machine has them, `VppPodPool` as they make it). The pod pool and "
                "`ExpediteKernelRcu` are measured side by side in \"VPP ADD and the kernel's RCU "
                "grace periods\" (`python3 -m benchmarks.cni.rcu_add`).", ""]
    return out


def _vpp_split(r: Results) -> list[str]:
    """Where the VPP agent's ADD time went over the full-node run: its phases, and VPP's own
    answer times per request (the agent's vswitch_cni_vpp_call_seconds)."""
    phases, calls = r.scale_vpp.get("phases", {}), r.scale_vpp.get("calls", {})
    if not phases or not calls:
        return []
    out = ["Where the VPP agent's ADD time went over this whole run (every ADD of the fill, "
           "not only the measured ones; the agent's histograms):", ""]
    out += phase_table(phases, None)
    rows = sorted(((name, h) for name, h in calls.items() if h.count),
                  key=lambda item: -item[1].sum)
    out += ["VPP's answer time per binary-API request over the same run (fill and DELs), by "
            "total time:", ""]
    out += md_table(("request", "count", "mean ms", "total s"),
                  [[name, fmt(h.count, 0), fmt(h.mean * 1000, 2), fmt(h.sum, 2)]
                   for name, h in rows[:8]])
    return out


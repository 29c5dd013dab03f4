"""The agent's scrape-time gauges (docs/metrics.md): each reads state the agent holds in memory,
so a scrape never waits on etcd or the vswitch."""

from __future__ import annotations

from collections.abc import Callable

from agent.app.running import RunningAgent
from agent.dataplane.vpp.heap import READ_EVERY, HeapWatch
from agent.infra.health import PROBE_INTERVAL
from agent.infra.metrics import Metrics
from agent.lifecycle.reconcile import ReconcileReport
from agent.state.journal import DeleteJournal
from ipam import NodeAllocator


def register_gauges(agent: RunningAgent, pools: NodeAllocator, journal: DeleteJournal) -> None:
    """The scrape-time gauges (docs/metrics.md)."""
    m = agent.metrics
    # Every pod holds one address of the first family, so the pool's use counts the pods.
    m.gauge("vswitch_cni_pods", "Pod attachments on this node.",
            lambda: float(pools.usage()[0]["inUse"]))  # type: ignore[arg-type]
    m.gauge("vswitch_cni_pending_deletes", "DELs whose etcd release is still journaled.",
            lambda: float(len(journal)))
    pending_links = getattr(agent.dataplane, "pending_link_deletes", None)
    if callable(pending_links):  # the kernel driver deletes DELs' links in the background
        m.gauge("vswitch_cni_pending_link_deletes",
                "Host links of deleted pods (down, unrouted) not deleted yet.",
                lambda: float(pending_links()))
    pod_pool = getattr(agent.dataplane, "pod_pool_state", None)
    if callable(pod_pool) and pod_pool() is not None:  # VPP, veth + AF_PACKET, VppPodPool > 0
        m.gauge("vswitch_cni_vpp_pod_pool_ready", "Ready veth + AF_PACKET pairs (spares).",
                lambda: float(pod_pool()[0]))
        m.counted("vswitch_cni_vpp_pod_pool_takes", "VPP ADDs by what the pod pool gave them: "
                  "a ready spare, the one being made, none (the ADD made its own pair).",
                  ("outcome",), lambda: [((k,), float(n)) for k, n in pod_pool()[1].items()])
    if agent.vpp_heap is not None:
        heap_gauges(m, agent.vpp_heap)
    for key, name, text in (("capacity", "capacity", "Assignable pod addresses"),
                            ("inUse", "in_use", "Pod addresses in use"),
                            ("free", "free", "Pod addresses free")):
        m.labelled(f"vswitch_cni_pool_{name}", f"{text} per family and subnet.",
                   ("family", "subnet"), _pool_reader(pools, key))
    m.labelled("vswitch_cni_reconcile_pods", "Outcome of the start-up reconcile per pod.",
               ("result",), lambda: reconcile_counts(agent.report))
    # Both from the probes' last answer: a scrape never waits on etcd or the vswitch.
    m.gauge("vswitch_cni_etcd_up", "1 when etcd answered the agent's last probe (every "
            f"{PROBE_INTERVAL:g} s).", lambda: float(agent.etcd_probe.up))
    m.labelled("vswitch_cni_dataplane_up", "1 when the vswitch answered the agent's last "
               f"probe (every {PROBE_INTERVAL:g} s; VPP: connected and answering).",
               ("dataplane",), lambda: [((agent.config.dataplane,),
                                         float(agent.dataplane_up()[0]))])
    m.labelled("vswitch_cni_mesh_nodes", "Remote nodes by mesh state.", ("state",),
               lambda: mesh_counts(agent))
    if agent.config.encryption != "off":
        for field, name, text in (
            ("rxBytes", "rx_bytes", "Bytes received from each peer node (WireGuard)"),
            ("txBytes", "tx_bytes", "Bytes sent to each peer node (WireGuard)"),
            ("latestHandshake", "latest_handshake_seconds",
             "Unix time of the last handshake with each peer node (0: none yet)"),
        ):
            m.labelled(f"vswitch_cni_wireguard_peer_{name}", f"{text}; read every 2 s.",
                       ("node",), _peer_reader(agent, field))


def heap_gauges(m: Metrics, heap: HeapWatch) -> None:
    """VPP's main heap as the watch last read it: no sample before the first read, nor while
    the stats segment does not answer (a number of a VPP that is gone would mislead)."""
    def reader(index: int) -> Callable[[], list[tuple[tuple[()], float]]]:
        def read() -> list[tuple[tuple[()], float]]:
            last = heap.last()
            return [] if last is None else [((), float(last[index]))]

        return read

    every = f"read from VPP's stats segment every {READ_EVERY:g} s"
    m.labelled("vswitch_cni_vpp_main_heap_used_bytes", f"Bytes of VPP's main heap in use; {every}.",
               (), reader(0))
    m.labelled("vswitch_cni_vpp_main_heap_size_bytes", "Size of VPP's main heap in bytes "
               f"(memory {{ main-heap-size }}); {every}.", (), reader(1))


def _peer_reader(agent: RunningAgent, field: str) -> Callable[[], list[tuple[tuple[str], float]]]:
    def read() -> list[tuple[tuple[str], float]]:
        view = agent.cluster.wireguard_view() if agent.cluster is not None else None
        # VPP's own WireGuard keeps no handshake time or bytes per peer (None): no sample
        return [((p["node"] or p["fingerprint"],), float(p[field]))
                for p in (view or {}).get("peers", []) if p.get(field) is not None]

    return read


def mesh_counts(agent: RunningAgent) -> list[tuple[tuple[str], float]]:
    """Remote nodes by mesh state."""
    counts = dict.fromkeys(("programmed", "failed", "pending"), 0)
    if agent.cluster is not None:
        for node in agent.cluster.snapshot()["nodes"]:
            state = node.get("mesh", {}).get("state", "pending")
            if state != "local":
                counts[state] = counts.get(state, 0) + 1
    return [((state,), float(n)) for state, n in sorted(counts.items())]


def _pool_reader(
    pools: NodeAllocator, key: str
) -> Callable[[], list[tuple[tuple[str, str], float]]]:
    def read() -> list[tuple[tuple[str, str], float]]:
        out = []
        for pool in pools.usage():
            subnet = str(pool["subnet"])
            family = "6" if ":" in subnet else "4"
            out.append(((family, subnet), float(pool[key])))  # type: ignore[arg-type]
        return out

    return read


def reconcile_counts(report: ReconcileReport) -> list[tuple[tuple[str], float]]:
    """Pods per reconcile outcome (the last reconcile; repairs after a VPP restart not counted)."""
    counts = {
        "live": report.live,
        "removed_unfinished": len(report.removed_unfinished),
        "removed_dead": len(report.removed_dead),
        "removed_orphans": len(report.removed_orphans),
        "repaired": len(report.repaired),
        "damaged": len(report.damaged),
        "errors": len(report.errors),
    }
    return [((result,), float(n)) for result, n in counts.items()]

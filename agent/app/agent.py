"""The agent process: builds every part from the config, in order, and runs until SIGTERM.

Start-up order matters: the REST endpoint first (probes get /liveness and a 503 /readiness
naming the phase from the first second, also while etcd is awaited), then etcd and the node ID
(the node's subnets follow from the ID), then the dataplane's base configuration, then reconcile,
and only then the CNI socket. A pod is never accepted before the agent knows what it already
has. Shutdown is the reverse: stop accepting, drain in-flight requests, remove the socket; pods
stay wired.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
import threading
import time
from concurrent import futures
from typing import Any

import grpc

from agent.api.grpc_server import CniService
from agent.api.httpd import Limits
from agent.api.rest import RestServer
from agent.app.cluster_side import ClusterSide
from agent.app.config import AgentConfig
from agent.app.gauges import register_gauges
from agent.app.kube_side import KubeSide, api_node_ip
from agent.app.rest_view import AgentView
from agent.app.wiring import make_dataplane, nat_plan
from agent.dataplane import Dataplane
from agent.dataplane.vpp.heap import HeapWatch
from agent.infra.backoff import retry_unavailable
from agent.infra.health import Probe
from agent.infra.loops import SupervisedLoop
from agent.infra.metrics import Metrics
from agent.lifecycle.pods import PodManager
from agent.lifecycle.reconcile import ReconcileReport, reconcile
from agent.linux import hostnat, rcu
from agent.model.errors import CniError, Degraded, NotReady, TryAgainLater
from agent.model.pod import PodRecord
from agent.state.id_guard import BindingGuard
from agent.state.journal import DeleteJournal
from agent.state.node_ids import NodeIdentity
from agent.state.store import Store
from ipam import NodeAllocator, NodeNetworks, node_networks
from protos import cni_pb2_grpc

log = logging.getLogger(__name__)


STARTUP_WAIT = 60.0  # seconds an agent waits at start for etcd, and then for its dataplane
WORKER_PREFIX = "cni-worker"  # the names of the threads that serve CNI requests


class StartupError(Exception):
    """The agent cannot start; the message says what to change."""


class Agent:
    """One node's agent. `start()` brings it up; `stop()` drains and closes."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.metrics = Metrics()
        self.store = Store(list(config.etcd_endpoints), config.etcd_prefix, config.etcd_timeout,
                           config.etcd_tls)
        # REST's etcd-backed views use a client of their own: no REST client's request ever
        # shares the connection (or waits behind the calls) of the CNI path.
        self.view_store = Store(list(config.etcd_endpoints), config.etcd_prefix,
                                config.etcd_timeout, config.etcd_tls)
        # etcd's health is the CNI path's own client's: each of its calls reports to the probe
        # (agent/infra/health) and a ping through it once a second covers the quiet times,
        # whatever REST does.
        # Readiness says whether ADDs reach etcd, and a second client can be connected while the
        # CNI path's is still marked failed (etcd just restarted).
        self.etcd_probe = Probe("etcd", self.store.ping)
        self.store.etcd.observer = self.etcd_probe
        self.dataplane_probe: Probe | None = None
        self.vpp_heap: HeapWatch | None = None  # Dataplane vpp: its main heap, watched
        self.node_id = 0
        self.networks: NodeNetworks | None = None
        self.pods: PodManager | None = None
        self.dataplane: Dataplane | None = None
        self.report = ReconcileReport()
        self._ready = threading.Event()
        self.phase = "starting"  # what start() is doing, the readiness reason until ready
        self._grpc: grpc.Server | None = None
        self._service: CniService | None = None
        self._workers: futures.ThreadPoolExecutor | None = None
        self._rest: RestServer | None = None
        self._stopping = threading.Event()
        self._watch: SupervisedLoop | None = None
        self._generation = 0  # the dataplane connection's generation the pods were checked at
        self.binding: BindingGuard | None = None
        self.repair_report: dict[str, Any] = {}
        self.cluster: ClusterSide | None = None
        self.kube: KubeSide | None = None  # None: no Kubernetes API (NetworkPolicy off)

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        cfg = self.config
        for warning in cfg.warnings:
            log.warning("%s", warning)
        # First of all: a live agent on this socket (a rolling update's overlap, a second copy)
        # means this one must touch nothing, least of all reconcile the other's pods.
        prepare_socket(cfg.cni_socket)
        self._rest = self._listen()
        self.etcd_probe.start()
        self.phase = "starting: waiting for etcd"
        self.node_id = NodeIdentity(self.store, cfg.node_name, cfg.ipam, cfg.state_dir).acquire(
            wait=STARTUP_WAIT, stopping=self._stopping, on_wait=self._etcd_awaited
        )
        self.networks = node_networks(cfg.ipam, self.node_id)
        log.info(
            "node %s has ID %d, pod subnets %s",
            cfg.node_name,
            self.node_id,
            [str(s) for s in self.networks.pod_subnets],
        )
        if cfg.expedite_kernel_rcu and cfg.dataplane == "vpp":
            rcu.expedite()
        # made, not started: no I/O yet
        self.dataplane = make_dataplane(cfg, self.networks, self.metrics)
        # Node IP and the MTU check before the dataplane starts: a pod MTU the uplink cannot
        # carry refuses the start. The VPP mesh shares the driver's connection.
        env = dict(os.environ)
        if api_ip := api_node_ip(cfg, env):  # no NodeIP, no NODE_IP: the Node's InternalIP
            env["NODE_IP"] = api_ip
        self.cluster = ClusterSide.build(cfg, self.networks, self.dataplane, env=env)
        self.phase = f"starting: setting up the {cfg.dataplane} dataplane"
        self._start_dataplane(self.dataplane)
        self.dataplane_probe = Probe("dataplane", self.dataplane.ready)
        self.dataplane_probe.start()
        if cfg.dataplane == "vpp":  # a warning before VPP's heap fills, and its gauges
            self.vpp_heap = HeapWatch.beside(cfg.vpp_api_socket)
            self.vpp_heap.start()
        try:
            hostnat.apply(nat_plan(cfg))
        except hostnat.NftError as exc:
            raise StartupError(f"cannot set up NAT (NatExternalTraffic): {exc}") from exc
        pools = NodeAllocator(self.networks)
        journal = DeleteJournal(os.path.join(cfg.state_dir, "pending-deletes"))
        node_ip = self.cluster.local.node_ip if self.cluster else cfg.node_ip
        self.kube = KubeSide.build(cfg, self.networks, node_ip, self.dataplane,
                                   self._local_records, self.metrics)
        if self.kube is not None and self.cluster is not None:
            self.kube.collect_nodes(self.cluster.registry, cfg.node_name, cfg.node_removal_grace)
        self.pods = PodManager(
            self.node_id, self.store, self.dataplane, pools, cfg.mtu, self.metrics, journal=journal,
            records_dir=os.path.join(cfg.state_dir, "pods"),
            policy=self.kube.controller if self.kube else None,
        )
        register_gauges(self, pools, journal)
        if self.kube is not None:  # its first lists run beside the reconcile
            self.kube.start()
        self.phase = "starting: reconciling pods"
        self.report = reconcile(self.pods)
        self.pods.start_drainer()
        self.binding = BindingGuard(self.store, cfg.node_name, self.node_id, self.pods)
        self.binding.start()
        self._start_watch(self.dataplane.generation())
        if self.cluster is not None:
            self.cluster.start()
        self._service = CniService(self.pods, self.status, cfg.workers)
        self.metrics.gauge("vswitch_cni_busy_workers", "CNI requests being served now.",
                           lambda: float(self._busy()))
        self._serve_cni(self._service)
        # Fresh answers before the first ready: the probes' last ones may predate the wait.
        self.etcd_probe.refresh()
        self.dataplane_probe.refresh()
        self._ready.set()
        log.info("agent ready on %s", cfg.cni_socket)

    def _local_records(self) -> list[PodRecord]:
        """This node's attachments as the agent knows them (memory, no etcd)."""
        return self.pods.known.all() if self.pods is not None else []

    def _etcd_awaited(self, exc: TryAgainLater) -> None:
        """Readiness names why etcd is awaited: a TLS failure is no outage to sit out."""
        self.phase = f"starting: waiting for etcd ({exc})"

    def dataplane_up(self) -> tuple[bool, str]:
        if self.dataplane_probe is None:
            return False, "not started"
        return self.dataplane_probe.state()

    def _start_dataplane(self, dataplane: Dataplane) -> None:
        """Starts the dataplane, waiting like for etcd while the vswitch is not up yet (in the
        DaemonSet VPP and the agent start together; giving up at once would crash-loop)."""
        def waiting(exc: TryAgainLater, left: float) -> None:
            log.warning("waiting for the %s dataplane: %s", dataplane.name, exc)
            self.phase = f"starting: waiting for the {dataplane.name} dataplane"

        try:
            retry_unavailable(dataplane.start, STARTUP_WAIT, self._stopping, waiting)
        except TryAgainLater as exc:
            if self._stopping.is_set():
                raise StartupError("stopped while waiting for the dataplane") from exc
            raise StartupError(f"the {dataplane.name} dataplane is not reachable: {exc}") from exc

    def _listen(self) -> RestServer:
        cfg = self.config
        limits = Limits(cfg.http_workers, cfg.http_max_connections, cfg.http_header_timeout)
        try:
            rest = RestServer(cfg.rest_binds, AgentView(self), limits)
        except OSError as exc:
            raise StartupError(f"cannot serve REST on HTTPAddress {self.config.http_address}: "
                               f"{exc.strerror or exc}") from exc
        rest.start()
        return rest

    def _serve_cni(self, service: CniService) -> None:
        path = self.config.cni_socket
        prepare_socket(path)  # again: a stale file may have appeared while reconciling
        workers = futures.ThreadPoolExecutor(self.config.workers, thread_name_prefix=WORKER_PREFIX)
        server = grpc.server(workers)
        self._workers = workers
        cni_pb2_grpc.add_RemoteCNIServicer_to_server(service, server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(f"unix:{path}")
        # The socket is the node's CNI endpoint: only root may talk to it (mode 0600). The umask
        # covers the moment grpc creates it; nothing else creates files while it is set.
        old = os.umask(0o177)
        try:
            server.start()
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        self._grpc = server

    def _start_watch(self, seen: int, interval: float = 1.0) -> None:
        """Watches the vswitch: when the driver has connected to it anew (VPP restarted, or
        the connection broke), every pod is checked and repaired without restarting the agent."""
        self._generation = seen
        self._watch = SupervisedLoop("dataplane-watch", self._check_dataplane, interval,
                                     expected=(CniError,), log=log)
        self._watch.start()

    def _check_dataplane(self) -> None:
        """One look: a new connection generation means the vswitch lost its state (VPP
        restarted): every pod is repaired, and the mesh relisted."""
        assert self.dataplane is not None and self.pods is not None
        assert self.dataplane_probe is not None
        # Its answer is the probe's too: once a repair is reported, readiness and STATUS have
        # heard that the vswitch answers again.
        started = self.dataplane_probe.now()
        answering = self.dataplane.ready()
        self.dataplane_probe.report(answering, "", started)
        if not answering or self.dataplane.generation() == self._generation:
            return
        self._generation = generation = self.dataplane.generation()
        log.warning("dataplane reconnected (generation %d): repairing pods", generation)
        started = time.monotonic()
        damaged = self.pods.repair_all()
        if self.cluster is not None:  # a restarted VPP lost the node mesh too
            self.cluster.controller.resync_now()
        if self.kube is not None:  # and its ACLs; repaired pods may have new interfaces
            self.kube.dataplane_changed()
        self.repair_report = {
            "generation": generation,
            "seconds": round(time.monotonic() - started, 4),
            "damaged": damaged,
        }
        log.warning("repair after reconnect: %d pods still damaged, %.2fs", len(damaged),
                    time.monotonic() - started)

    def interrupt(self) -> None:
        """From a signal handler: ends waits in start() (the caller then calls stop())."""
        self._stopping.set()

    def stop(self, grace: float = 30.0) -> None:
        """Stops accepting, lets in-flight requests finish (up to `grace`), closes."""
        self._ready.clear()
        self._stopping.set()
        if self._watch is not None:
            self._watch.stop()
        if self._grpc is not None:
            self._grpc.stop(grace).wait()
            self._grpc = None
            assert self._workers is not None
            self._workers.shutdown(wait=False)  # idle workers end; a stuck one: see agent.main
            # Only the agent that served the socket removes it: one that was refused at start
            # must not take the live agent's socket away.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.config.cni_socket)
        if self._rest is not None:
            self._rest.stop()
        self.etcd_probe.stop()
        if self.dataplane_probe is not None:
            self.dataplane_probe.stop()
        if self.vpp_heap is not None:
            self.vpp_heap.stop()
        if self.cluster is not None:
            self.cluster.stop()
        if self.kube is not None:  # the policy rules stay in place: pods stay isolated
            self.kube.stop()
        if self.binding is not None:
            self.binding.stop()
        if self.pods is not None:
            self.pods.stop()
        if self.dataplane is not None:
            self.dataplane.close()
        self.store.close()
        self.view_store.close()

    # ---- health ----------------------------------------------------------------------------

    def status(self) -> None:
        """CNI STATUS: raises NotReady (50) or Degraded (51); returns when all is well."""
        ok, reason = self.ready()
        if not ok:
            raise NotReady("the agent cannot accept ADDs", reason)
        damaged = self.repair_report.get("damaged", self.report.damaged)
        if damaged:
            raise Degraded(
                "some pods may have lost connectivity",
                f"{len(damaged)} pods damaged: {', '.join(sorted(damaged)[:5])}",
            )

    def ready(self) -> tuple[bool, str]:
        """Reads state only (the probes' last answers, flags, counters): /readiness and CNI
        STATUS never wait on etcd or the vswitch, however often they are asked."""
        if not self._ready.is_set():
            return False, "stopping" if self._stopping.is_set() else self.phase
        etcd_up, etcd_reason = self.etcd_probe.state()
        if not etcd_up:
            # a TLS failure names itself; anything else is etcd not answering
            tls = "TLS" in etcd_reason
            return False, etcd_reason if tls else f"etcd unreachable: {etcd_reason}"
        if self.cluster is not None and self.cluster.removed():
            return False, "this node was removed from the cluster (node remove): restart its agent"
        if self.binding is not None and self.binding.lost:
            return False, self.binding.lost
        dataplane_up, dataplane_reason = self.dataplane_up()
        if not dataplane_up:
            return False, f"dataplane {self.config.dataplane} not ready: {dataplane_reason}"
        if self.pods is not None and self.pods.pools.exhausted():
            return False, "pod subnet exhausted"
        if self._service is not None and self._service.saturated():
            return False, f"all {self.config.workers} CNI workers are busy"
        return True, "ready"

    def _busy(self) -> int:
        return self._service.busy() if self._service is not None else 0

    @property
    def serving(self) -> bool:
        """start() has finished and stop() has not begun."""
        return self._ready.is_set()

    def live(self) -> bool:
        return True


def prepare_socket(path: str) -> None:
    """Makes the socket's directory and replaces a stale socket, never a live one or a file."""
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise StartupError(f"{path} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        os.unlink(path)  # nobody listens: a leftover of an agent that died
        return
    except OSError as exc:
        raise StartupError(f"cannot tell whether {path} is in use: {exc}") from exc
    finally:
        probe.close()
    raise StartupError(f"another agent is serving on {path}; stop it first")

"""The soak's churn on one running agent (benchmarks/soak): fill the node, cycle pods, check each
cycle, sample each window, count leaks at the end. See benchmarks/soak/run.py for the cycle.
"""

from __future__ import annotations

import random
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from agent.dataplane.vpp import names
from agent.model.pod import PodKey
from benchmarks.core import machine
from benchmarks.core.harness import CniNetwork, Namespaces, Pod, k8s_args
from benchmarks.soak import sample
from benchmarks.soak.report import DataplaneRun, Window
from testbed.agent import AgentHandle
from testbed.echo import TCP_PORT, UDP_PORT, EchoHub, probe
from testbed.service import DnatService
from testbed.vpp import VppProbe, VppWatch

MAX_DETAILS = 100
GIVE_UP_AFTER = 25  # cycles in a row with a failure: the node is broken, stop


@dataclass(frozen=True)
class Settings:
    pods: int
    cycles: int  # 0: no limit
    minutes: float
    window: int
    seed: int
    vpp_socket: str = ""  # the VPP dataplane's API socket ("" for the kernel dataplane)


@dataclass
class SoakPod:
    pod: Pod
    address: str
    link: str  # the veth's host end
    tag: str  # the owner tag of its VPP interface


class Churn:
    def __init__(self, dataplane: str, settings: Settings, agent: AgentHandle, net: CniNetwork,
                 namespaces: Namespaces, etcd_endpoint: str, log: Callable[[str], None]) -> None:
        self.dataplane = dataplane
        self.s = settings
        self.agent = agent
        self.net = net
        self.namespaces = namespaces
        self.etcd_endpoint = etcd_endpoint
        self.log = log
        self.rng = random.Random(settings.seed)
        self.hub = EchoHub()
        # An address no range of the soak's uses, unique per run: the Service's ClusterIP.
        self.service = DnatService(f"10.127.{self.rng.randrange(1, 255)}."
                                   f"{self.rng.randrange(1, 255)}")
        api_dir = str(agent.config.get("VPPAPIDir", ""))
        self.probe = VppProbe(settings.vpp_socket, api_dir) if settings.vpp_socket else None
        self.watch = VppWatch(settings.vpp_socket, api_dir) if settings.vpp_socket else None
        self.live: deque[SoakPod] = deque()
        self.dead: dict[str, SoakPod] = {}  # by container ID
        self.result = DataplaneRun(dataplane=dataplane, pods=settings.pods, window=settings.window)
        self._adds: list[float] = []
        self._dels: list[float] = []
        self._window_failures = 0
        self._failing_in_a_row = 0
        self._started = time.monotonic()

    # --- the run ------------------------------------------------------------------------------
    def run(self) -> DataplaneRun:
        self.log(f"{self.dataplane}: filling the node with {self.s.pods} pods")
        while len(self.live) < self.s.pods:
            if self._add() is None:
                raise RuntimeError(f"ADD failed while filling the node: {self.result.details}")
        self.service.point_to(self.live[-1].address, TCP_PORT, UDP_PORT)
        self._adds.clear()
        self._started = time.monotonic()
        self._sample(0)
        deadline = self._started + self.s.minutes * 60
        cycle = 0
        while (not self._vpp_gone() and time.monotonic() < deadline
               and (not self.s.cycles or cycle < self.s.cycles)):
            cycle += 1
            failed = self._cycle()
            self._failing_in_a_row = self._failing_in_a_row + 1 if failed else 0
            if cycle % self.s.window == 0:
                self._sample(cycle)
                self.log(self._progress(cycle))
            if self._failing_in_a_row >= GIVE_UP_AFTER:
                self.result.details.append(f"stopped: {GIVE_UP_AFTER} failing cycles in a row")
                break
        if cycle % self.s.window and self._adds:
            self._sample(cycle)
        self.result.cycles = cycle
        self.result.seconds = time.monotonic() - self._started
        if not self._vpp_gone():
            self._final_counts()
        return self.result

    def _vpp_gone(self) -> bool:
        """VPP stopped answering at the last sample: the run ends there, without leak counts
        (they would ask VPP), and says so."""
        if not self.result.windows:
            return False
        last = self.result.windows[-1]
        if last.values.get("vpp_answers", 1.0) != 0.0:
            return False
        note = (f"VPP stopped answering its API (sample at cycle {last.cycle}): the run ends "
                "there")
        if note not in self.result.details:
            self.result.details.append(note)
            self.log(f"{self.dataplane}: {note}")
        return True

    def close(self) -> None:
        for pod in list(self.live):
            self.hub.stop(str(pod.pod.netns))
            try:  # a DEL may fail (VPP gone): the namespace goes all the same
                self.net.lib.delete(self.net.conflist, pod.pod.container_id, pod.pod.netns,
                                    args=pod.pod.args)
            except Exception as exc:  # cleanup goes on whatever failed
                self.log(f"{self.dataplane}: DEL of {pod.pod.container_id} at the end: {exc}")
            self.namespaces.remove(pod.pod.netns)
        self.live.clear()
        self.hub.close()
        self.service.remove()
        if self.probe is not None:
            self.probe.close()
        if self.watch is not None:
            self.watch.stop()
            self.result.vpp_pings = self.watch.pings
            self.result.vpp_unanswered = self.watch.unanswered
            self.result.vpp_slowest_ms = self.watch.slowest_ms

    def all_links(self) -> set[str]:
        return {p.link for p in (*self.live, *self.dead.values())}

    # --- one cycle ----------------------------------------------------------------------------
    def _cycle(self) -> bool:
        """DEL the oldest pod, ADD a new one, check; True when something failed."""
        failures_before = self.result.failures
        self._delete(self.live.popleft())
        new = self._add()
        if new is None:
            return True
        older = list(self.live)[:-1]
        target = self.rng.choice(older)
        self._check(new, target.address, TCP_PORT, "tcp", target.address)
        backend = older[-1]  # the Service's endpoint moves every cycle
        self.service.point_to(backend.address, TCP_PORT, UDP_PORT)
        for proto in ("tcp", "udp"):
            self._check(new, self.service.ip, 80, proto, backend.address)
        return self.result.failures > failures_before

    def _add(self) -> SoakPod | None:
        cid = secrets.token_hex(32)
        pod = Pod(cid, self.namespaces.create(), k8s_args(cid))
        started = time.perf_counter()
        rc, out = self.net.lib.add(self.net.conflist, cid, pod.netns, args=pod.args)
        self._adds.append((time.perf_counter() - started) * 1000)
        if rc != 0:
            self._fail(f"ADD {cid[:12]}: {out}")
            self.net.lib.delete(self.net.conflist, cid, pod.netns, args=pod.args)
            self.namespaces.remove(pod.netns)
            return None
        key = PodKey(cid, "eth0")
        # VPP: a reused name (agent/dataplane/vpp/podlinks), the one the result reports
        link = (next(i["name"] for i in out["interfaces"] if not i.get("sandbox"))
                if self.dataplane == "vpp"
                else f"{self.agent.config['HostInterfacePrefix']}{key.digest(11)}")
        soak_pod = SoakPod(pod, str(out["ips"][0]["address"]).split("/")[0], link,
                           names.pod_tag(key))
        self.hub.serve(str(pod.netns), soak_pod.address)
        self.live.append(soak_pod)
        return soak_pod

    def _delete(self, old: SoakPod) -> None:
        self.hub.stop(str(old.pod.netns))  # the pod's processes end before its DEL
        started = time.perf_counter()
        rc, out = self.net.lib.delete(self.net.conflist, old.pod.container_id, old.pod.netns,
                                      args=old.pod.args)
        self._dels.append((time.perf_counter() - started) * 1000)
        if rc != 0:
            self._fail(f"DEL {old.pod.container_id[:12]}: {out}")
        self.namespaces.remove(old.pod.netns)
        self.dead[old.pod.container_id] = old

    def _check(self, pod: SoakPod, addr: str, port: int, proto: str, expect: str) -> None:
        got = probe(str(pod.pod.netns), proto, addr, port)
        if not got.ok or got.server != expect:
            what = "Service " if addr == self.service.ip else ""
            self._fail(f"{proto} {pod.address} -> {what}{addr}:{port}: "
                       f"{got.detail or f'answered by {got.server}, expected {expect}'}")

    def _fail(self, detail: str) -> None:
        self.result.failures += 1
        self._window_failures += 1
        if len(self.result.details) < MAX_DETAILS:
            self.result.details.append(f"after {time.monotonic() - self._started:.0f} s: {detail}")

    # --- samples --------------------------------------------------------------------------------
    def _sample(self, cycle: int) -> None:
        newest = self.live[-1]
        for other in list(self.live)[:-1]:  # the newest pod reaches every live pod
            self._check(newest, other.address, TCP_PORT, "tcp", other.address)
        values = self._read()
        self.result.windows.append(Window(
            cycle=cycle, seconds=time.monotonic() - self._started, load1=machine.loadavg(),
            add_ms=list(self._adds), del_ms=list(self._dels), failures=self._window_failures,
            values=values))
        self._adds.clear()
        self._dels.clear()
        self._window_failures = 0

    def _owned(self) -> sample.Owned:
        live_addresses = frozenset(p.address for p in self.live)
        return sample.Owned(
            live_links=frozenset(p.link for p in self.live),
            # VPP reuses the host ends' names: a live pod may have a deleted one's
            dead_links=frozenset(p.link for p in self.dead.values()) - {p.link for p in self.live},
            live_tags=frozenset(p.tag for p in self.live),
            dead_tags=frozenset(p.tag for p in self.dead.values()),
            live_addresses=live_addresses,
            dead_addresses=frozenset(p.address for p in self.dead.values()) - live_addresses,
            pod_subnet=str(self.agent.config["IPAMConfig"]["PodSubnetCIDR"]),
        )

    def _read(self) -> dict[str, float]:
        owned = self._owned()
        cfg = self.agent.config
        values = {f"agent_{k}": v for k, v in sample.process(self.agent.process.pid).items()}
        values |= sample.host(owned, {str(cfg["NatTable"]), self.service.table})
        values |= sample.etcd(self.etcd_endpoint, str(cfg["EtcdPrefix"]))
        values |= sample.agent_views(self.agent)
        if self.probe is not None:
            values |= sample.vpp(self.probe, owned, int(cfg["MainVRFID"]),
                                      int(cfg["PodVRFID"]))
        return values

    def _progress(self, cycle: int) -> str:
        last = self.result.windows[-1]
        v = last.values
        vpp = (f", VPP heap {v['vpp_heap_used_kib'] / 1024:.1f} MiB"
               if "vpp_heap_used_kib" in v else "")
        add = sorted(last.add_ms)[len(last.add_ms) // 2] if last.add_ms else 0.0
        return (f"{self.dataplane}: cycle {cycle}, {last.seconds / 60:.1f} min, "
                f"{self.result.failures} failures, ADD p50 {add:.0f} ms, agent RSS "
                f"{v['agent_rss_kib'] / 1024:.1f} MiB, fds {v['agent_fds']:.0f}{vpp}, "
                f"load {last.load1}")

    # --- the end ----------------------------------------------------------------------------
    def _final_counts(self) -> None:
        """Leak counts with the live pods still up, then after deleting every one of them."""
        self.result.leaks_live = self._leaks()
        for pod in list(self.live):
            self._delete(pod)
        self.live.clear()
        self.result.leaks_empty = self._leaks()
        self.result.final_del_ms = list(self._dels)

    def _leaks(self) -> dict[str, float]:
        # DELs' veths go in the background (the kernel's; VPP's with its pod pool)
        pending = self.agent.links_settled(timeout=30)
        if pending:
            self.result.details.append(pending)
        return self._read()

"""One node under fault injection: its agent (restarted at will) and a runtime's view of its pods.

`FaultNode` owns everything a fault test creates and removes it in `close()`, also after a
failure: the agent process, the gateway interface, every host link carrying its interface
prefix, and every pod namespace it made. Names are unique per run (other suites share this
machine): the pod subnet is a /16 no route of this machine touches yet, the host interface
prefix is `f` + 3 hex digits no existing link starts with (the other integration suites use `t`).

The runtime side follows the CNI spec the way containerd and CRI-O do: a pod exists for the
runtime once its ADD answered success and until a DEL answered success; after a failed ADD the
runtime calls DEL for that attachment; a failed DEL is retried. A pod's namespace is removed
only after its DEL succeeded and the checks looked inside it (`forget`).
"""

from __future__ import annotations

import json
import random
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.agent import (
    AgentHandle,
    PluginResult,
    agent_config,
    net_config,
    run_plugin,
    start_agent,
)
from testbed.netns import unique

NETNS_DIR = "/var/run/netns"
START_ATTEMPTS = 3


@dataclass
class Pod:
    """One attachment as the runtime knows it."""

    container_id: str
    netns: str
    ifname: str = "eth0"
    address: str = ""  # CIDR from the ADD result, once ADD succeeded
    gateway: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.container_id, self.ifname)

    @property
    def ip(self) -> str:
        return self.address.split("/")[0]

    def __str__(self) -> str:
        return f"{self.container_id}/{self.ifname}"


@dataclass
class Outcome:
    """A plugin call's result in the form assertion messages quote."""

    verb: str
    pod: Pod
    result: PluginResult
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.result.returncode == 0

    @property
    def deferred(self) -> bool:
        """A DEL the plugin answered with success without the agent doing it (best effort:
        the agent could not be reached, or died before replying; reconcile releases later)."""
        return self.ok and self.verb == "DEL" and "agent unreachable" in self.result.stderr

    @property
    def code(self) -> int | None:
        """The CNI error code printed on failure; None when the output is no error object."""
        if self.ok:
            return 0
        try:
            body = json.loads(self.result.stdout)
        except json.JSONDecodeError:
            return None
        code = body.get("code") if isinstance(body, dict) else None
        return code if isinstance(code, int) else None

    def __str__(self) -> str:
        if self.ok:
            return f"{self.verb} {self.pod}: ok"
        return (
            f"{self.verb} {self.pod}: exit {self.result.returncode} code {self.code} "
            f"{self.result.stdout.strip()[:300]} {self.result.stderr.strip()[-300:]}"
        )


_LEVEL = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def _significant(lines: list[str]) -> list[str]:
    """Log lines at INFO and above, with the untimestamped lines (tracebacks) that follow."""
    kept: list[str] = []
    keep = False
    for line in lines:
        level = _LEVEL.match(line)
        if level:
            keep = level.group(1) != "DEBUG"
        if keep:
            kept.append(line[:400])
    return kept


def pod_has_interface(pod: Pod) -> bool:
    out = subprocess.run(["ip", "-n", pod.netns.rsplit("/", 1)[1], "link", "show", pod.ifname],
                         capture_output=True, check=False)
    return out.returncode == 0


def pod_interface_works(pod: Pod) -> bool:
    """The pod's interface exists and has its carrier (operstate UP): it can carry traffic.
    A DEL's veth goes down at once and is deleted in the background (agent/dataplane/undo):
    until then the pod end is still there, without carrier."""
    out = subprocess.run(
        ["ip", "-j", "-n", pod.netns.rsplit("/", 1)[1], "link", "show", pod.ifname],
        capture_output=True, text=True, check=False,
    )
    if out.returncode != 0:
        return False
    links: list[dict[str, Any]] = json.loads(out.stdout or "[]")
    return any(link.get("operstate") == "UP" for link in links)


def host_links() -> list[dict[str, Any]]:
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=True)
    links: list[dict[str, Any]] = json.loads(out.stdout or "[]")
    return links


def _free_host_prefix() -> str:
    names = [str(link.get("ifname", "")) for link in host_links()]
    for _ in range(100):
        prefix = f"f{secrets.token_hex(2)[:3]}"
        if not any(name.startswith(prefix) for name in names):
            return prefix
    raise RuntimeError("no free host interface prefix")


def _free_pod_subnet() -> str:
    """A /16 in 10.200-231 that no route of this machine overlaps (node 1 gets its 2nd /24)."""
    candidates = list(range(200, 232))
    random.SystemRandom().shuffle(candidates)
    for octet in candidates:
        subnet = f"10.{octet}.0.0/16"
        routes = subprocess.run(
            ["ip", "-o", "route", "show", "root", subnet],
            capture_output=True, text=True, check=True,
        ).stdout
        if not routes.strip():
            return subnet
    raise RuntimeError("no free pod subnet in 10.200.0.0-10.231.255.255")


@dataclass
class FaultNode:
    """An agent on a fixed config (so restarts keep the node), and the pods it serves."""

    tmp_path: Path
    etcd_endpoints: list[str]
    extra_config: Mapping[str, Any] = field(default_factory=dict)
    name: str = "fault"

    def __post_init__(self) -> None:
        extra: dict[str, Any] = {
            "HostInterfacePrefix": _free_host_prefix(),
            "GatewayInterface": unique("fgw"),
        }
        extra.update(self.extra_config)
        self.config = agent_config(
            self.tmp_path,
            self.etcd_endpoints,
            pod_subnet=_free_pod_subnet(),
            node_name=f"{self.name}-{secrets.token_hex(3)}",
            extra_config=extra,
        )
        self.prefix: str = self.config["HostInterfacePrefix"]
        self.gateway_ifname: str = self.config["GatewayInterface"]
        self.agent: AgentHandle | None = None
        self.starts = 0
        self.start_retries = 0  # agents that exited at start, etcd unreachable (see start)
        self.namespaces: set[str] = set()
        self.live: dict[tuple[str, str], Pod] = {}  # the runtime's view: ADD ok, no DEL ok yet
        self.deleted: dict[tuple[str, str], Pod] = {}  # DEL ok, namespace not removed yet
        self.gone: dict[tuple[str, str], Pod] = {}  # of those, DELs the agent answered itself
        self.pod_network = ""

    # ---- the agent -------------------------------------------------------------------------

    def start(self, failpoint: str = "", wait: bool = True) -> AgentHandle:
        """Starts the agent (after the previous one is dead); waits until it is ready unless
        `wait` is false (to kill it while it starts and reconciles)."""
        assert self.agent is None or self.agent.process.poll() is not None, "agent still runs"
        for attempt in range(START_ATTEMPTS):
            self.starts += 1
            env = {"VSWITCH_FAILPOINTS": failpoint}
            agent = start_agent(self.tmp_path, self.config, f"{self.name}-{self.starts}", env=env)
            self.agent = agent
            if not wait:
                return agent
            try:
                agent.wait_ready()
                break
            except RuntimeError:
                # An agent that cannot reach etcd at start exits (and the kubelet restarts it).
                # On a loaded machine a fresh etcd connection fails now and then: restart too.
                if "etcd is unreachable" not in agent.log() or attempt == START_ATTEMPTS - 1:
                    raise
                self.start_retries += 1
                time.sleep(0.5)
        if not self.pod_network:
            status, body = agent.get("/contiv/v1/ipam")
            assert status == 200, body
            self.pod_network = body["podNetwork"]
        return agent

    @property
    def running(self) -> AgentHandle:
        assert self.agent is not None and self.agent.process.poll() is None, "no agent runs"
        return self.agent

    def kill(self) -> int:
        """SIGKILL, as the OOM killer or a power cut would; returns the exit status."""
        assert self.agent is not None
        if self.agent.process.poll() is None:
            self.agent.process.send_signal(signal.SIGKILL)
        return self.agent.process.wait(timeout=30)

    def wait_dead(self, timeout: float = 20.0) -> int:
        """Waits for an agent that is expected to kill itself at a failpoint."""
        assert self.agent is not None
        return self.agent.process.wait(timeout=timeout)

    def log(self, lines: int = 25) -> str:
        """The last INFO-and-above lines (with tracebacks) of every agent this node started."""
        parts = []
        for path in sorted(self.tmp_path.glob(f"{self.name}-*.log"),
                           key=lambda p: int(p.stem.rsplit("-", 1)[1])):
            kept = _significant(path.read_text(errors="replace").splitlines())
            parts.append(f"--- {path.name}\n" + "\n".join(kept[-lines:]))
        return "\n".join(parts)

    # ---- namespaces and plugin calls -------------------------------------------------------

    def new_pod(self) -> Pod:
        name = unique("fpod")
        subprocess.run(["ip", "netns", "add", name], check=True)
        path = f"{NETNS_DIR}/{name}"
        self.namespaces.add(path)
        return Pod(container_id=f"c{secrets.token_hex(8)}", netns=path)

    def remove_netns(self, path: str) -> None:
        subprocess.run(["ip", "netns", "del", path.rsplit("/", 1)[1]],
                       capture_output=True, check=False)
        self.namespaces.discard(path)

    def net_config(self) -> dict[str, Any]:
        assert self.agent is not None
        return net_config(self.agent, timeoutSeconds=10)

    def call(self, verb: str, pod: Pod) -> Outcome:
        """One plugin exec (ADD, DEL, CHECK), without touching the runtime's view."""
        start = time.monotonic()
        result = run_plugin(verb, self.net_config(), container_id=pod.container_id,
                            netns=pod.netns, ifname=pod.ifname, timeout=60)
        return Outcome(verb, pod, result, time.monotonic() - start)

    def record(self, outcome: Outcome) -> None:
        """Updates the runtime's view from a finished call."""
        pod = outcome.pod
        if not outcome.ok:
            return
        if outcome.verb == "ADD":
            ip = outcome.result.json["ips"][0]
            pod.address, pod.gateway = ip["address"], ip.get("gateway", "")
            self.live[pod.key] = pod
            self.gone.pop(pod.key, None)
            self.deleted.pop(pod.key, None)
        elif outcome.verb == "DEL":
            self.live.pop(pod.key, None)
            if not outcome.deferred:
                self.gone[pod.key] = pod
            # else the agent may not have torn anything down: nothing to look for in the pod
            self.deleted[pod.key] = pod

    def add(self, pod: Pod) -> Outcome:
        outcome = self.call("ADD", pod)
        self.record(outcome)
        return outcome

    def delete(self, pod: Pod) -> Outcome:
        outcome = self.call("DEL", pod)
        self.record(outcome)
        return outcome

    def forget(self) -> list[str]:
        """The runtime removes the sandboxes whose DEL succeeded, as containerd and CRI-O do
        right after DEL; returns the pods whose namespace still held a working interface
        although the agent itself answered their DEL (its delete may still be pending: the
        interface is then there, without carrier)."""
        found = []
        for key, pod in self.deleted.items():
            if key in self.gone and pod_interface_works(pod):
                found.append(f"deleted pod {pod} still has a working {pod.ifname} in {pod.netns}")
            self.remove_netns(pod.netns)
        self.deleted.clear()
        self.gone.clear()
        return found

    # ---- cleanup ---------------------------------------------------------------------------

    def close(self) -> None:
        if self.agent is not None and self.agent.process.poll() is None:
            self.agent.stop()
        for path in list(self.namespaces):
            self.remove_netns(path)
        for link in host_links():
            name = str(link.get("ifname", ""))
            if name.startswith(self.prefix) or name == self.gateway_ifname:
                subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)

"""Real components the benchmarks run on, each undone by the caller's ExitStack.

- `Namespaces`: named network namespaces (pods and libcni 'host' namespaces), all removed at the
  end; removing a pod namespace also frees the veth pair whose pod end lives in it.
- `launch_agent` / `agent_running`: a real `vswitch-agent` process (kernel dataplane, or VPP when
  asked) at the production log level (INFO), with a unique EtcdPrefix, node name,
  HostInterfacePrefix and gateway interface; stopped with SIGTERM at the end, its gateway, any
  host link with its prefix and its NAT table removed.
- `plugin_bin_dir`: the plugin installed as the DaemonSet does (agent.install_cni's launcher
  and code zip).
- `CniNetwork`: one network driven through the libcni driver: ours (vswitch-cni) or the
  reference bridge + host-local. Both run the driver inside a 'host' namespace of the benchmark's
  own (via nsenter), so both pay the same exec overhead and the bridge never touches the machine.
- `interrupter`: a SIGTERM/SIGHUP handler that unwinds like Ctrl-C, so every cleanup runs.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType
from typing import Any

import yaml
from pyroute2 import IPRoute, netns

from agent.install_files import SHEBANG_FLAGS, build_plugin
from agent.linux import hostnat
from testbed.agent import AgentHandle, agent_config
from testbed.libcni import REFERENCE_PLUGINS, Libcni, unique

REPO = Path(__file__).resolve().parents[2]
NETNS_DIR = Path("/run/netns")
# What containerd and the kubelet run plugins with: no version-manager shims.
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# The interpreter the DaemonSet pins in the plugin's shebang (k8s/base/vswitch.yaml's --python).
NODE_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


class Namespaces:
    """Creates named network namespaces; `close()` removes every one it created."""

    def __init__(self, prefix: str = "vsb") -> None:
        self.prefix = prefix
        self.created: list[str] = []

    def create(self) -> Path:
        for _ in range(5):
            # pid + 32 random bits: hundreds of pods at once must not meet (15 characters)
            name = f"{self.prefix}{os.getpid() % 10000:04d}{secrets.token_hex(4)}"
            try:
                netns.create(name)
            except FileExistsError:
                continue
            self.created.append(name)
            return NETNS_DIR / name
        raise RuntimeError("no free network namespace name after 5 tries")

    def remove(self, path: Path) -> None:
        name = path.name
        if name in self.created:
            self.created.remove(name)
            netns.remove(name)

    def close(self) -> None:
        while self.created:
            name = self.created.pop()
            with contextlib.suppress(OSError):  # already gone
                netns.remove(name)


def bench_agent_config(
    tmp: Path, etcd_endpoints: list[str], pod_subnet: str, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """testbed.agent's config (unique prefix, gateway, links), sized for 250+ pods."""
    config = agent_config(tmp, etcd_endpoints, pod_subnet=pod_subnet,
                          node_name=f"bench-{secrets.token_hex(4)}", extra_config=extra)
    # 'b' + 3 hex digits: no test agent ('t...') shares it, so the final sweep is ours alone
    config["HostInterfacePrefix"] = f"b{secrets.token_hex(2)[:3]}"
    # a /22 per node: 1020 pods, room for the 250-pod figures
    config["IPAMConfig"] = {"PodSubnetCIDR": pod_subnet, "PodNetworkPrefixLen": 22}
    return config


def launch_agent(tmp: Path, config: dict[str, Any], name: str = "agent",
                 profile_to: Path | None = None) -> AgentHandle:
    """Starts `vswitch-agent` (as testbed.agent.start_agent, but at INFO, as deployed);
    with `profile_to`, under cProfile writing there when the agent exits."""
    config_path = tmp / f"{name}.yaml"
    config_path.write_text(yaml.safe_dump(config))
    log_path = tmp / f"{name}.log"
    profiler = ["-m", "cProfile", "-o", str(profile_to)] if profile_to else []
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, *profiler, "-m", "agent.main", "--config", str(config_path)],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
        )
    return AgentHandle(process=process, socket=Path(config["CNISocket"]),
                       config_path=config_path, rest_url=f"http://{config['HTTPAddress']}",
                       log_path=log_path, gateway_ifname=config["GatewayInterface"],
                       config=config)


def wait_ready(agent: AgentHandle, timeout: float = 120.0) -> float:
    """Polls /readiness every 5 ms until 200; returns the monotonic time it answered 200."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if agent.process.poll() is not None:
            raise RuntimeError(f"agent exited with {agent.process.returncode}:\n{agent.log()}")
        try:
            status, _ = agent.get("/readiness")
            if status == 200:
                return time.monotonic()
        except OSError:
            pass
        time.sleep(0.005)
    raise RuntimeError(f"agent not ready after {timeout}s:\n{agent.log()[-3000:]}")


def remove_agent_links(config: Mapping[str, Any]) -> None:
    """Removes the agent's gateway, any host link carrying its (unique) prefix, and its NAT
    table (a stopped agent keeps it on purpose: pods keep their egress while it restarts)."""
    prefix = str(config["HostInterfacePrefix"])
    with IPRoute() as ipr:
        for link in ipr.get_links():
            name = str(link.get_attr("IFLA_IFNAME") or "")
            if name == config["GatewayInterface"] or name.startswith(prefix):
                with contextlib.suppress(Exception):  # gone in between: fine
                    ipr.link("del", index=link["index"])
    if config.get("NatTable"):  # the agent's own table (testbed.agent names one per agent)
        with contextlib.suppress(hostnat.NftError):
            hostnat.remove(str(config["NatTable"]))


@contextmanager
def agent_running(tmp: Path, config: dict[str, Any], name: str = "agent") -> Iterator[AgentHandle]:
    agent = launch_agent(tmp, config, name)
    try:
        wait_ready(agent)
        yield agent
    finally:
        agent.stop()


def vm_rss_bytes(pid: int) -> int:
    """VmRSS of a process, from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def plugin_bin_dir(tmp: Path) -> Path:
    """A CNI bin dir holding the plugin as the DaemonSet's install-cni writes it (launcher and
    code zip)."""
    bin_dir = tmp / "cni-bin"
    bin_dir.mkdir()
    build_plugin(bin_dir / "vswitch-cni", interpreter=f"{NODE_PYTHON} {SHEBANG_FLAGS}")
    return bin_dir


def k8s_args(container_id: str) -> dict[str, str]:
    """CNI_ARGS as the kubelet sends them (to both plugins alike)."""
    return {"IgnoreUnknown": "1", "K8S_POD_NAMESPACE": "bench",
            "K8S_POD_NAME": f"pod-{container_id[:12]}", "K8S_POD_INFRA_CONTAINER_ID": container_id,
            "K8S_POD_UID": str(uuid.uuid4())}


@dataclass
class Pod:
    container_id: str
    netns: Path
    args: dict[str, str]


class CniNetwork:
    """One network config driven through libcni; every verb's wall time is measured around the
    driver's exec (what a runtime waits for)."""

    def __init__(self, label: str, lib: Libcni, conflist: Mapping[str, Any], tmp: Path) -> None:
        self.label = label
        self.lib = lib
        self.conflist = tmp / f"{label}.conflist"
        self.conflist.write_text(json.dumps(conflist, indent=1))

    def new_pod(self, namespaces: Namespaces) -> Pod:
        cid = secrets.token_hex(32)
        return Pod(cid, namespaces.create(), k8s_args(cid))

    def _timed(self, verb: str, pod: Pod) -> float:
        start = time.perf_counter()
        method = {"add": self.lib.add, "check": self.lib.check, "del": self.lib.delete}[verb]
        rc, out = method(self.conflist, pod.container_id, pod.netns, args=pod.args)
        elapsed = (time.perf_counter() - start) * 1000
        if rc != 0:
            raise RuntimeError(f"{self.label} {verb.upper()} failed: {out}")
        return elapsed

    def add(self, pod: Pod) -> float:
        return self._timed("add", pod)

    def check(self, pod: Pod) -> float:
        return self._timed("check", pod)

    def delete(self, pod: Pod) -> float:
        return self._timed("del", pod)


def libcni_for(driver: Path, bin_dir: Path, tmp: Path, host_netns: Path, label: str) -> Libcni:
    cache = tmp / f"libcni-cache-{label}"
    cache.mkdir()
    env = {"PATH": SYSTEM_PATH, "HOME": "/root"}
    return Libcni(driver, [bin_dir], cache, netns_path=host_netns, env=env, timeout=60)


def ours_network(driver: Path, bin_dir: Path, tmp: Path, host_netns: Path,
                 agent: AgentHandle, label: str = "vswitch-cni") -> CniNetwork:
    conflist = {"cniVersion": "1.1.0", "name": f"vswitch-bench-{label}", "plugins": [
        {"type": "vswitch-cni", "agentSocket": str(agent.socket), "timeoutSeconds": 30}]}
    return CniNetwork(label, libcni_for(driver, bin_dir, tmp, host_netns, label), conflist, tmp)


def reference_network(driver: Path, tmp: Path, host_netns: Path) -> CniNetwork:
    """bridge + host-local 1.9.1 in the libcni host namespace (a /16: room for every figure)."""
    subnet = ipaddress.ip_network("10.252.0.0/16")
    data_dir = tmp / "host-local"
    conflist = {"cniVersion": "1.1.0", "name": "refnet-bench", "plugins": [{
        "type": "bridge", "bridge": unique("vsbbr"), "isGateway": True, "ipMasq": False,
        "ipam": {"type": "host-local", "subnet": str(subnet), "dataDir": str(data_dir)}}]}
    lib = libcni_for(driver, REFERENCE_PLUGINS, tmp, host_netns, "reference")
    return CniNetwork("bridge+host-local", lib, conflist, tmp)


class PodSubnets:
    """Distinct /16s for our agents' pods in the machine's namespace, apart from the test suites'
    ranges (10.160-199, 10.233-236, 10.250-251), so that agents never share routes; the start is
    random, so that two benchmark runs at once are unlikely to meet."""

    SECOND_OCTETS = (*range(200, 230), *range(240, 250))

    def __init__(self) -> None:
        self._next = secrets.randbelow(len(self.SECOND_OCTETS))

    def take(self) -> str:
        octet = self.SECOND_OCTETS[self._next % len(self.SECOND_OCTETS)]
        self._next += 1
        return f"10.{octet}.0.0/16"


def join_or_kill(procs: Iterable[BaseProcess], timeout: float = 60.0) -> None:
    """Waits for each of a benchmark's worker processes (told to stop) up to `timeout`, and
    kills one that is still there."""
    for proc in procs:
        proc.join(timeout=timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()


def interrupter(main_pid: int) -> Callable[[int, FrameType | None], None]:
    """SIGTERM/SIGHUP -> KeyboardInterrupt, so that every cleanup runs as on Ctrl-C. Only in this
    process: pyroute2 forks helpers (inheriting the handler) and stops them with SIGTERM; they
    must die as usual, never unwind into our cleanup code."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != main_pid:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt(f"signal {signum}")

    return handler


def interrupt_on_signals() -> None:
    """SIGTERM and SIGHUP end this process as Ctrl-C does (`interrupter`): a killed benchmark
    removes what it made."""
    handler = interrupter(os.getpid())
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)

"""A real `vswitch-agent` process (tests, benchmarks, the one-node demo), and the real plugin
exec'd against it.

`running_agent(...)` writes a config, starts the agent (kernel dataplane, in this machine's root
namespace, like a hostNetwork agent), waits until its REST /readiness says ready, and stops it
at the end (SIGTERM, then SIGKILL), removing the gateway interface it created, also when the
test failed. `run_plugin(...)` execs the installed `vswitch-cni` the way a runtime does.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agent.dataplane.vpp.names import RETIRED_TAG, SPARE_TAG
from agent.linux import hostnat, netlink
from agent.model.errors import CniError
from testbed import tools
from testbed.etcd import free_port
from testbed.tools import REPO
from testbed.vpp import remove_base

POOL_TAGS = (SPARE_TAG, RETIRED_TAG)  # aliases of the VPP driver's own pairs (its pod pool)

AGENT = [sys.executable, "-m", "agent.main"]


def stop_process(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> int:
    """Sends `sig` to a running agent, waits up to 30 s (then kills it); its exit code."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


@dataclass
class AgentHandle:
    process: subprocess.Popen[bytes]
    socket: Path
    config_path: Path
    rest_url: str
    log_path: Path
    gateway_ifname: str
    config: dict[str, Any]

    def get(self, path: str) -> tuple[int, Any]:
        """GET a REST path; returns (status, decoded JSON or text)."""
        try:
            with urllib.request.urlopen(self.rest_url + path, timeout=5) as resp:
                body = resp.read().decode()
                status = resp.status
        except urllib.error.HTTPError as exc:
            body, status = exc.read().decode(), exc.code
        try:
            return status, json.loads(body)
        except json.JSONDecodeError:
            return status, body

    def allocated(self) -> set[str]:
        """The addresses the agent's REST view lists as allocated (no prefix length)."""
        status, body = self.get("/v1/allocations")
        assert status == 200, body
        return {ip.split("/")[0] for ip in body["allocations"]}

    def links_settled(self, timeout: float = 10.0) -> str:
        """Waits until the agent has deleted the links of the DELs it answered (the kernel
        dataplane deletes a DEL's veth in the background, down and unrouted already): its
        vswitch_cni_pending_link_deletes gauge is 0. Returns "" or what is still pending."""
        deadline = time.monotonic() + timeout
        value = ""
        while time.monotonic() < deadline:
            status, text = self.get("/metrics")
            lines = str(text).splitlines() if status == 200 else []
            found = [ln for ln in lines if ln.startswith("vswitch_cni_pending_link_deletes ")]
            value = found[0].split()[1] if found else "missing"
            if value in ("0", "0.0"):
                return ""
            time.sleep(0.05)
        return f"the agent still has link deletes pending after {timeout:.0f} s ({value})"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"agent exited with {self.process.returncode}:\n{self.log()}")
            try:
                status, _ = self.get("/readiness")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"agent not ready after {timeout}s:\n{self.log()}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        return stop_process(self.process, sig)


def agent_config(
    tmp_path: Path,
    etcd_endpoints: list[str],
    *,
    pod_subnet: str,
    node_name: str,
    extra_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    suffix = secrets.token_hex(3)
    config: dict[str, Any] = {
        "NodeName": node_name,
        "EtcdEndpoints": etcd_endpoints,
        "EtcdPrefix": f"/vswitch-cni-test-{suffix}/",
        "CNISocket": str(tmp_path / "run" / "cni.sock"),
        "StateDir": str(tmp_path / "state"),
        "HTTPAddress": f"127.0.0.1:{free_port()}",
        "Dataplane": "kernel",
        "GatewayInterface": f"vsgw{suffix}",
        # Agents of concurrent test runs share this namespace: each owns only its own links.
        "HostInterfacePrefix": f"t{suffix[:3]}",
        "MTUSize": 1400,
        # The machine's namespace is shared: no egress NAT for test pods unless a test asks,
        # and each agent's NAT table (the VPP service return path) is its own.
        "NatExternalTraffic": False,
        "NatTable": f"vswitch-cni-test-{suffix}",
        "IPAMConfig": {"PodSubnetCIDR": pod_subnet, "PodNetworkPrefixLen": 24},
    }
    config.update(extra_config or {})
    return config


def start_agent(
    tmp_path: Path,
    config: dict[str, Any],
    name: str = "agent",
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
) -> AgentHandle:
    """Starts the agent process; `env` adds variables (e.g. VSWITCH_FAILPOINTS), `args`
    command-line options (e.g. --log-format json)."""
    config_path = tmp_path / f"{name}.yaml"
    config_path.write_text(yaml.safe_dump(config))
    log_path = tmp_path / f"{name}.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [*AGENT, "--config", str(config_path), "--log-level", "DEBUG", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, **(env or {})},
        )
    return AgentHandle(
        process=process,
        socket=Path(config["CNISocket"]),
        config_path=config_path,
        rest_url=f"http://{config['HTTPAddress']}",
        log_path=log_path,
        gateway_ifname=config["GatewayInterface"],
        config=config,
    )


def exit_at_start(workdir: Path, config: dict[str, Any],
                  timeout: float = 60.0) -> tuple[int, str]:
    """Starts the agent of `config`, expected to refuse to start: its exit code and its log."""
    agent = start_agent(workdir, config)
    try:
        code = agent.process.wait(timeout=timeout)
    finally:
        agent.stop()
    return code, agent.log()


@contextmanager
def running_agent(
    tmp_path: Path,
    etcd_endpoints: list[str],
    *,
    pod_subnet: str,
    node_name: str = "",
    extra_config: Mapping[str, Any] | None = None,
    wait: float = 30.0,
    args: Sequence[str] = (),
) -> Iterator[AgentHandle]:
    """An agent with a test's config (agent_config): its own key prefix, links and NAT table."""
    config = agent_config(
        tmp_path,
        etcd_endpoints,
        pod_subnet=pod_subnet,
        node_name=node_name or f"node-{secrets.token_hex(3)}",
        extra_config=extra_config,
    )
    with serving_agent(tmp_path, config, wait=wait, args=args) as handle:
        yield handle


@contextmanager
def serving_agent(
    workdir: Path,
    config: dict[str, Any],
    *,
    wait: float = 30.0,
    args: Sequence[str] = (),
) -> Iterator[AgentHandle]:
    """The agent of `config`, ready; at the end stopped, and what it made on the node removed."""
    handle = start_agent(workdir, config, args=args)
    pod_network = ""
    try:
        handle.wait_ready(timeout=wait)
        if config.get("Dataplane") == "vpp":
            pod_network = str(handle.get("/contiv/v1/ipam")[1]["podNetwork"])
        yield handle
    finally:
        handle.stop()
        if pod_network:
            # VPP's interconnect interface before its veth: a veth deleted under VPP's
            # AF_PACKET socket makes VPP poll a dead device (testbed/vpplog).
            with contextlib.suppress(CniError):
                remove_base(config, pod_network)
        # The node-side links the agent made: the kernel gateway, or VPP's interconnect (its
        # veth peer goes with it).
        for name in (handle.gateway_ifname, config.get("VPPHostInterface")):
            if name:
                subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
        # The VPP driver's spare and retired pairs (its pod pool) that it could not delete
        # itself (VPP gone before it stopped); with VPP up remove_base took them, VPP first.
        prefix = str(config.get("HostInterfacePrefix", ""))
        with contextlib.suppress(CniError):
            for name, alias in netlink.links_with_alias_prefix("vswitch-cni/").items():
                if prefix and name.startswith(prefix) and alias in POOL_TAGS:
                    netlink.delete_link(name)
        # Only a table of its own: the default one may be a real agent's on this machine.
        if config.get("NatTable"):
            with contextlib.suppress(hostnat.NftError):
                hostnat.remove(config["NatTable"])


@dataclass
class PluginResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)


def plugin_path() -> str:
    """The project's installed plugin (testbed.tools: beside this interpreter, never PATH)."""
    return str(tools.plugin())


def run_plugin(
    command: str,
    config: Mapping[str, Any],
    *,
    container_id: str = "",
    netns: str = "",
    ifname: str = "eth0",
    args: str = "",
    timeout: float = 60,
) -> PluginResult:
    """Execs the real plugin with CNI_* variables and the config on stdin."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "CNI_COMMAND": command,
        "CNI_PATH": "/usr/lib/cni",
        "PYTHONPATH": str(REPO),  # this checkout's plugin
    }
    if container_id:
        env["CNI_CONTAINERID"] = container_id
    if netns:
        env["CNI_NETNS"] = netns
    if ifname:
        env["CNI_IFNAME"] = ifname
    if args:
        env["CNI_ARGS"] = args
    proc = subprocess.run(
        [plugin_path()],
        input=json.dumps(dict(config)).encode(),
        env=env,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    return PluginResult(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def net_config(agent: AgentHandle, version: str = "1.1.0", **extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": version,
        "name": "vswitch-test",
        "type": "vswitch-cni",
        "agentSocket": str(agent.socket),
        "stateDir": agent.config["StateDir"],
        "timeoutSeconds": 20,
        **extra,
    }

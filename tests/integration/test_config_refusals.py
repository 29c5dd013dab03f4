"""The agent process refuses a config that cannot work with exit 2 and a message naming the key,
before it touches anything (issue 15, defect 9: these were tracebacks, some found only after the
node ID was claimed or the gateway interface made).

Plan: for each bad value (a config that is not UTF-8, http:// and https:// etcd endpoints mixed,
an etcd endpoint with a bad port, an HTTPAddress that does not resolve, a CNISocket over the unix
path limit, a StateDir under a regular file, a GatewayInterface with a space), on top of a config
that otherwise starts: exit 2, the key in the log, no traceback, no gateway interface and no
socket directory made. (Bad etcd TLS files: tests/integration/test_etcd_tls.py.)
A node IP that other nodes cannot reach (NodeIP or NODE_IP on no interface of the node, or a
loopback NODE_IP): the agent does not start, its log names the source and the address, nothing
is published to the node registry (it was published with a warning).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.state.registry import Registry
from agent.state.store import Store
from testbed.agent import AGENT, agent_config, start_agent

CASES: list[tuple[str, Any]] = [
    ("EtcdEndpoints", ["http://127.0.0.1:2379", "https://127.0.0.1:2380"]),
    ("EtcdEndpoints", ["http://127.0.0.1:twentythree"]),
    ("HTTPAddress", "no-such-host.invalid:9999"),
    ("CNISocket", "/tmp/" + "s" * 110 + ".sock"),
    ("StateDir", "{file}/state"),
    ("GatewayInterface", "vs gw"),
]


def link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


def refused(tmp_path: Path, config: dict[str, Any]) -> str:
    socket_dir = Path(config["CNISocket"]).parent
    had_socket_dir = socket_dir.exists()
    handle = start_agent(tmp_path, config)
    try:
        code = handle.process.wait(timeout=60)
    finally:
        handle.stop()
        subprocess.run(["ip", "link", "del", config["GatewayInterface"]], capture_output=True,
                       check=False)
    log = handle.log()
    assert code == 2, log
    assert "Traceback" not in log, log
    assert socket_dir.exists() == had_socket_dir
    return log


@pytest.mark.parametrize(("key", "value"), CASES)
def test_bad_value_is_refused_before_anything_is_touched(
        tmp_path: Path, etcd_endpoints: list[str], key: str, value: Any) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    config = agent_config(tmp_path, etcd_endpoints, pod_subnet="10.244.0.0/16",
                          node_name="refused")
    gateway = config["GatewayInterface"]
    config[key] = value.format(file=blocker) if isinstance(value, str) else value
    log = refused(tmp_path, config)
    assert key in log
    assert not link_exists(gateway)


def test_config_that_is_not_utf8_is_refused(tmp_path: Path, etcd_endpoints: list[str]) -> None:
    config = agent_config(tmp_path, etcd_endpoints, pod_subnet="10.244.0.0/16",
                          node_name="refused")
    path = tmp_path / "latin1.yaml"
    path.write_bytes(yaml.safe_dump(config).encode() + "# Gr\xfc\xdfe\n".encode("latin-1"))
    out = subprocess.run([*AGENT, "--config", str(path)], capture_output=True, text=True,
                         timeout=60, check=False, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 2, out.stderr
    assert "not UTF-8" in out.stderr and str(path) in out.stderr
    assert "Traceback" not in out.stderr
    assert not link_exists(config["GatewayInterface"])


# --- issue 23, defect 6: a node IP other nodes cannot reach is not published -------------------
def on_some_interface(ip: str) -> bool:
    out = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True, check=True)
    return f" {ip}/" in out.stdout


@pytest.mark.parametrize(("source", "ip"), [
    ("NodeIP", "192.0.2.77"),  # TEST-NET-1: on no interface of this machine
    ("NODE_IP", "192.0.2.78"),
    ("NODE_IP", "127.0.0.1"),  # on lo, so an uplink; but every node would tunnel to itself
])
def test_a_node_ip_no_node_can_reach_is_refused_and_not_published(
        tmp_path: Path, etcd_endpoints: list[str], source: str, ip: str) -> None:
    assert ip.startswith("127.") or not on_some_interface(ip)
    config = agent_config(tmp_path, etcd_endpoints, pod_subnet="10.245.0.0/16",
                          node_name="unreachable-ip")
    env = {"NODE_IP": ip} if source == "NODE_IP" else {}
    if source == "NodeIP":
        config["NodeIP"] = ip
    handle = start_agent(tmp_path, config, env=env)
    try:
        with pytest.raises(RuntimeError, match="agent exited"):
            handle.wait_ready(timeout=60)  # the agent was ready, its node published, before
    finally:
        handle.stop()
        subprocess.run(["ip", "link", "del", config["GatewayInterface"]], capture_output=True,
                       check=False)
    log = handle.log()
    assert handle.process.returncode != 0, log
    assert f"{source} {ip}" in log, log
    assert "Traceback" not in log, log
    assert not link_exists(config["GatewayInterface"])
    registry = Registry(Store(etcd_endpoints, config["EtcdPrefix"], 2.0))
    try:
        assert registry.entries()[0] == {}
    finally:
        registry.close()

"""The agent as a process: socket mode, shutdown, restart with its node ID and pods kept.

Plan:
- the CNI socket is mode 0600; SIGTERM exits 0 and removes the socket; pods stay wired;
- a restarted agent (same node name) gets its node ID back, and its pods keep their addresses,
  stay reachable, and are deleted normally afterwards;
- a second agent on the same socket refuses to start and leaves the first serving;
- a bad config is refused at start with the key named.
"""

from __future__ import annotations

import secrets
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from testbed.agent import (
    AgentHandle,
    agent_config,
    net_config,
    run_plugin,
    running_agent,
    start_agent,
)
from testbed.etcd import EtcdServer
from testbed.netns import ping

SUBNET = "10.236.0.0/16"


def test_restart_keeps_node_id_and_pod_addresses(
    tmp_path: Path, etcd_endpoints: list[str], make_netns: Callable[[], str]
) -> None:
    ns = make_netns()
    container = f"c{secrets.token_hex(8)}"
    config = agent_config(tmp_path, etcd_endpoints, pod_subnet=SUBNET,
                          node_name=f"restart-{secrets.token_hex(3)}")
    first = start_agent(tmp_path, config, "first")
    try:
        first.wait_ready()
        mode = stat.S_IMODE(first.socket.stat().st_mode)
        assert mode == 0o600, oct(mode)
        _, ipam_before = first.get("/contiv/v1/ipam")
        added = run_plugin("ADD", net_config(first), container_id=container, netns=ns)
        assert added.returncode == 0, added.stdout
        address = added.json["ips"][0]["address"]
        gateway = added.json["ips"][0]["gateway"]
        assert first.stop() == 0
        assert not first.socket.exists()
        assert ping(ns, gateway), "pods must keep their wiring while the agent is down"

        second = start_agent(tmp_path, config, "second")
        try:
            second.wait_ready()
            _, ipam_after = second.get("/contiv/v1/ipam")
            assert ipam_after["nodeId"] == ipam_before["nodeId"]
            assert address.split("/")[0] in second.allocated()
            again = run_plugin("ADD", net_config(second), container_id=container, netns=ns)
            assert again.json["ips"][0]["address"] == address
            assert ping(ns, gateway)
            deleted = run_plugin("DEL", net_config(second), container_id=container, netns=ns)
            assert deleted.returncode == 0
        finally:
            second.stop()
    finally:
        first.stop()
        subprocess.run(["ip", "link", "del", config["GatewayInterface"]],
                       capture_output=True, check=False)


def test_second_agent_on_the_same_socket_refuses(
    tmp_path: Path, etcd_endpoints: list[str]
) -> None:
    with running_agent(tmp_path, etcd_endpoints, pod_subnet=SUBNET) as first:
        clash = dict(first.config, NodeName="other", HTTPAddress="127.0.0.1:0")
        clash["HTTPAddress"] = f"127.0.0.1:{secrets.randbelow(20000) + 30000}"
        second = start_agent(tmp_path, clash, "second")
        assert second.process.wait(timeout=60) != 0
        assert "another agent" in second.log()
        assert first.socket.exists()
        assert first.get("/readiness")[0] == 200


def test_bad_config_is_refused_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("MTUSize: 12\n")
    out = subprocess.run([sys.executable, "-m", "agent.main", "--config", str(path)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2
    assert "MTUSize" in out.stderr and "12" in out.stderr


def test_sigterm_drains_in_flight_adds(
    tmp_path: Path, etcd_endpoints: list[str], make_netns: Callable[[], str]
) -> None:
    """ADDs racing a SIGTERM either complete or are refused as retryable (code 11); none is cut
    half-way (which would show as another code, or as state left behind after DEL)."""
    pods = [(make_netns(), f"c{secrets.token_hex(8)}") for _ in range(24)]
    config = agent_config(tmp_path, etcd_endpoints, pod_subnet=SUBNET,
                          node_name=f"drain-{secrets.token_hex(3)}")
    agent = start_agent(tmp_path, config, "draining")
    try:
        agent.wait_ready()
        started = threading.Event()

        answers: list[str] = []

        def add(pod: tuple[str, str]) -> int:
            started.set()
            out = run_plugin("ADD", net_config(agent), container_id=pod[1], netns=pod[0])
            if out.returncode != 0:
                answers.append(out.stdout)
            return 0 if out.returncode == 0 else int(out.json["code"])

        with ThreadPoolExecutor(12) as pool:
            futures = [pool.submit(add, p) for p in pods]
            started.wait(10)
            time.sleep(0.05)  # let some requests reach the agent
            agent.process.send_signal(signal.SIGTERM)
            codes = [f.result() for f in futures]
        assert agent.process.wait(timeout=60) == 0
        assert set(codes) <= {0, 11}, f"{codes}\n{answers}\n{agent.log()[-4000:]}"

        again = start_agent(tmp_path, config, "after-drain")
        try:
            again.wait_ready()
            for ns, container in pods:
                out = run_plugin("DEL", net_config(again), container_id=container, netns=ns)
                assert out.returncode == 0, out.stdout
            assert again.get("/v1/allocations") == (200, {"allocations": {}})
        finally:
            again.stop()
    finally:
        agent.stop()
        subprocess.run(["ip", "link", "del", config["GatewayInterface"]],
                       capture_output=True, check=False)


def wait_for_log(agent: AgentHandle, text: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in agent.log():
        assert agent.process.poll() is None, agent.log()
        assert time.monotonic() < deadline, f"no {text!r} in the agent's log:\n{agent.log()}"
        time.sleep(0.05)


def test_agent_waits_for_an_etcd_that_starts_after_it(tmp_path: Path) -> None:
    """A node reboot starts etcd and the agent in any order: the agent retries instead of
    exiting, and a SIGTERM still ends the wait."""
    with EtcdServer() as etcd:
        etcd.stop()
        config = agent_config(tmp_path, etcd.endpoints, pod_subnet=SUBNET,
                              node_name=f"late-{secrets.token_hex(3)}")
        agent = start_agent(tmp_path, config, "early")
        try:
            # Waiting for what the agent says, not a fixed time: under load its start-up (the
            # imports) alone can take longer than any sleep chosen here.
            wait_for_log(agent, "etcd not reachable yet")
            assert agent.process.poll() is None, agent.log()
            etcd.start()
            agent.wait_ready()
        finally:
            agent.stop()
            subprocess.run(["ip", "link", "del", config["GatewayInterface"]],
                           capture_output=True, check=False)
        assert "etcd not reachable yet" in agent.log()

        etcd.stop()
        waiting = start_agent(tmp_path, config, "interrupted")
        wait_for_log(waiting, "etcd not reachable yet")  # its SIGTERM handler is in place
        assert waiting.process.poll() is None
        assert waiting.stop() == 1  # SIGTERM ends the wait: "cannot start", not a hang


def test_sigterm_ends_the_agent_even_with_a_worker_stuck_in_a_request(
    tmp_path: Path, etcd_endpoints: list[str], make_netns: Callable[[], str]
) -> None:
    """A worker that never returns (held for ever at a failpoint, as a deadlock or a wedged
    syscall would) must not keep a stopped agent alive (issue 15, defect 4)."""
    config = agent_config(tmp_path, etcd_endpoints, pod_subnet=SUBNET,
                          node_name=f"stuck-{secrets.token_hex(3)}")
    agent = start_agent(tmp_path, config, "stuck", env={"VSWITCH_FAILPOINTS": "add:wire=hang"})
    try:
        agent.wait_ready()
        out = run_plugin("ADD", net_config(agent, timeoutSeconds=2),
                         container_id=f"c{secrets.token_hex(8)}", netns=make_netns())
        assert out.returncode != 0, out.stdout
        assert "failpoint add:wire: hang" in agent.log()
        agent.process.send_signal(signal.SIGTERM)
        try:
            code: int | None = agent.process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 0, agent.log()[-3000:]
        assert "still in a request" in agent.log()
    finally:
        agent.stop(signal.SIGKILL)
        for line in subprocess.run(["ip", "-o", "link"], capture_output=True,
                                   text=True).stdout.splitlines():
            name = line.split(":")[1].strip().split("@")[0]
            if name.startswith(config["HostInterfacePrefix"]) or name == config["GatewayInterface"]:
                subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)

"""Probes while the agent waits for etcd at start (issue 15, defect 12): its REST port used to
stay closed for up to a minute ("connection refused" where docs/rest-api.md promises 503).

Plan: an agent whose etcd endpoint has nobody listening serves /liveness 200 and a 503
/readiness that names the phase, 503 with a JSON error for the views that need etcd or the pods,
touches no dataplane, and ends on SIGTERM.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from testbed.agent import AgentHandle, agent_config, start_agent
from testbed.etcd import free_port


def wait_for_rest(agent: AgentHandle, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert agent.process.poll() is None, agent.log()
        try:
            agent.get("/liveness")
            return
        except OSError:
            assert time.monotonic() < deadline, f"REST never answered:\n{agent.log()}"
            time.sleep(0.05)


def test_rest_answers_while_etcd_is_awaited(tmp_path: Path) -> None:
    nobody = [f"http://127.0.0.1:{free_port()}"]
    config = agent_config(tmp_path, nobody, pod_subnet="10.245.0.0/16", node_name="patient")
    agent = start_agent(tmp_path, config)
    try:
        wait_for_rest(agent)
        assert agent.get("/liveness") == (200, {"live": True})
        # the port opens in the "starting" phase, before the wait for etcd begins (on a loaded
        # machine the first readiness can still say so): every answer is a 503 naming a phase
        deadline = time.monotonic() + 10
        while True:
            status, body = agent.get("/readiness")
            assert status == 503 and body["ready"] is False, body
            if "waiting for etcd" in body["reason"] or time.monotonic() > deadline:
                break
            assert body["reason"] == "starting", body
            time.sleep(0.05)
        assert "waiting for etcd" in body["reason"], body
        for path in ("/contiv/v1/ipam", "/v1/allocations", "/v1/pools", "/v1/pods"):
            status, body = agent.get(path)
            assert status == 503 and isinstance(body["error"], str), (path, body)
        gateway = subprocess.run(["ip", "link", "show", config["GatewayInterface"]],
                                 capture_output=True, check=False)
        assert gateway.returncode != 0  # nothing of the dataplane before the node ID
    finally:
        agent.stop()
        subprocess.run(["ip", "link", "del", config["GatewayInterface"]], capture_output=True,
                       check=False)
    assert agent.process.returncode is not None

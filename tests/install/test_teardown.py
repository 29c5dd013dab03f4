"""`vswitch-agent --config F --teardown`: a node leaving removes the agent's host state.

Plan: a real agent (kernel dataplane) wires a pod through the real plugin, then stops (SIGTERM
keeps pods and the gateway on purpose); teardown removes the pod's host link, the gateway
interface and with them the pod-subnet and pod routes, and says what it removed. While the agent
runs, teardown is refused and removes nothing. A second teardown finds nothing to remove.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from testbed.agent import net_config, run_plugin, running_agent

ROOT = Path(__file__).resolve().parents[2]


def teardown(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent.main", "--config", str(config),
                           "--teardown"], capture_output=True, text=True, cwd=ROOT, check=False)


def links(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                         check=True).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()
            if line.split(":")[1].strip().startswith(prefix)]


def routes(*devices: str) -> list[str]:
    """Routes through our links (other test runs on this machine may use the same subnet)."""
    out = subprocess.run(["ip", "route", "show"], capture_output=True, text=True,
                         check=True).stdout
    return [line for line in out.splitlines() if any(f" dev {d} " in f"{line} " for d in devices)]


def wait_for(condition: Callable[[], bool], attempts: int = 50) -> bool:
    """The kernel drops a deleted link's routes when it unregisters it, a moment later."""
    for _ in range(attempts):
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def test_teardown_removes_the_gateway_pod_links_and_routes(
    tmp_path: Path, etcd_endpoints: list[str], make_netns: Callable[[], str],
) -> None:
    with running_agent(tmp_path, etcd_endpoints, pod_subnet="10.243.0.0/16") as agent:
        prefix, gateway = agent.config["HostInterfacePrefix"], agent.gateway_ifname
        added = run_plugin("ADD", net_config(agent, "1.0.0"), netns=make_netns(),
                           container_id=f"c{secrets.token_hex(6)}",
                           args="K8S_POD_NAMESPACE=default;K8S_POD_NAME=leaving")
        assert added.returncode == 0, added.stdout + added.stderr
        refused = teardown(agent.config_path)
        assert refused.returncode == 1 and "teardown refused" in refused.stderr
        assert links(prefix) != [] and links(gateway) == [gateway]
        agent.stop()
        (pod_link,) = links(prefix)
        assert len(routes(gateway, pod_link)) == 2  # the pod subnet's and the pod's
        done = teardown(agent.config_path)
        assert done.returncode == 0, done.stderr
        assert f"removed gateway interface {gateway}" in done.stdout
        assert f"removed pod link {pod_link}" in done.stdout
        assert links(prefix) == [] and links(gateway) == []
        assert wait_for(lambda: routes(gateway, pod_link) == []), routes(gateway, pod_link)
        again = teardown(agent.config_path)
        assert again.returncode == 0 and "(0 items)" in again.stdout

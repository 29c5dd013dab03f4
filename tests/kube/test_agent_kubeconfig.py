"""The agent process with a KubeConfig it cannot read: refused at start in one line naming the
key and the file (exit 2, no traceback, nothing made on the node). Runs everywhere: no API
server is needed to be refused.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from testbed.agent import agent_config, exit_at_start


def test_an_unreadable_kubeconfig_is_refused_at_start(tmp_path: Path,
                                                      etcd_endpoints: list[str]) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")  # no cluster, no context
    config = agent_config(tmp_path, etcd_endpoints, pod_subnet="10.78.0.0/16",
                          node_name="kubeconfig-refused",
                          extra_config={"KubeConfig": str(bad)})
    code, log = exit_at_start(tmp_path, config)
    assert code == 2, log
    assert "'KubeConfig'" in log and str(bad) in log and "NetworkPolicy" in log, log
    assert "Traceback" not in log
    gateway = subprocess.run(["ip", "link", "show", config["GatewayInterface"]],
                             capture_output=True, check=False)
    assert gateway.returncode != 0, "the agent made its gateway before refusing"

"""The node the runtime tests share: a real agent (kernel dataplane), the plugin installed by
agent.install_cni with the shipped conflist, and the checks that nothing is left afterwards.

A runtime that cannot start here makes its tests skip with the runtime's own reason; with the
environment variable CI or VSWITCH_REQUIRE_RUNTIMES set they fail instead, so CI never passes by
skipping them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyetcd
import pytest

from testbed.agent import AgentHandle, running_agent
from tests.helpers import conflist

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_SOURCE = Path("/usr/lib/cni")  # Debian's containernetworking-plugins (portmap, loopback)
LIBCNI_CACHE = Path("/var/lib/cni/results")  # where libcni keeps each ADD's result until DEL


def cached_results(container_ids: list[str]) -> list[str]:
    """libcni's cached ADD results that name one of these containers."""
    names = [p.name for p in LIBCNI_CACHE.iterdir()] if LIBCNI_CACHE.exists() else []
    return [name for name in names if any(cid in name for cid in container_ids)]


def unavailable(reason: str) -> None:
    """Skips the test, or fails it where the runtimes must run (CI)."""
    if os.environ.get("CI") or os.environ.get("VSWITCH_REQUIRE_RUNTIMES"):
        pytest.fail(f"runtime required here but unavailable: {reason}")
    pytest.skip(reason)


def require(*programs: str) -> None:
    missing = [p for p in programs if shutil.which(p) is None]
    if missing:
        unavailable(f"not installed: {', '.join(missing)} (.ci/install-system installs them)")
    if os.geteuid() != 0:
        unavailable("runtimes and the agent need root")


@dataclass
class Node:
    agent: AgentHandle
    bin_dir: Path
    conf_dir: Path
    etcd_endpoints: list[str]

    def etcd_keys(self, sub: str) -> list[str]:
        """Keys under the agent's prefix + `sub` (e.g. "pods/", "ipam/"), read from etcd."""
        host, port = self.etcd_endpoints[0].removeprefix("http://").rsplit(":", 1)
        client = pyetcd.client(host=host, port=int(port))
        try:
            prefix = self.agent.config["EtcdPrefix"] + sub
            return [meta.key.decode() for _, meta in client.get_prefix(prefix)]
        finally:
            client.close()

    def host_links(self) -> list[str]:
        out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                             check=True).stdout
        prefix = self.agent.config["HostInterfacePrefix"]
        return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()
                if line.split(":")[1].strip().startswith(prefix)]

    def leftovers(self) -> list[str]:
        """What a removed pod may not leave: agent view, etcd keys, host links."""
        found = []
        status, pods = self.agent.get("/v1/pods")
        assert status == 200, pods
        found += [f"agent record {p['container_id']}" for p in pods["pods"]]
        found += [f"agent allocation {ip}" for ip in self.agent.allocated()]
        found += [f"etcd key {k}" for k in self.etcd_keys("pods/") + self.etcd_keys("ipam/")]
        pending = self.agent.links_settled()  # a DEL's veth goes in the background
        found += [pending] if pending else []
        found += [f"host link {name}" for name in self.host_links()]
        return found


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, etcd_endpoints: list[str]) -> Iterator[Node]:
    """An agent with the plugin installed as an operator installs it (shipped conflist)."""
    require("ip", "iptables")
    if not (PLUGIN_SOURCE / "portmap").exists():
        unavailable(f"no reference plugins in {PLUGIN_SOURCE} (Debian containernetworking-plugins)")
    tmp = tmp_path_factory.mktemp("node")
    with running_agent(tmp, etcd_endpoints, pod_subnet="10.237.0.0/16") as agent:
        bin_dir, conf_dir = tmp / "cni-bin", tmp / "cni-conf"
        bin_dir.mkdir()
        conf_dir.mkdir()
        source = conflist.for_agent(tmp, agent.socket, agent.config["StateDir"])
        out = subprocess.run(
            [sys.executable, "-m", "agent.install_cni", f"--bin-dir={bin_dir}",
             f"--conf-dir={conf_dir}", f"--conflist={source}", f"--plugin-source={PLUGIN_SOURCE}"],
            capture_output=True, text=True, cwd=ROOT, check=False)
        assert out.returncode == 0, out.stdout + out.stderr
        yield Node(agent, bin_dir, conf_dir, etcd_endpoints)

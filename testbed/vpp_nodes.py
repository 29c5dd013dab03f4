"""Nodes of the one-machine cluster (testbed/cluster.py) with `Dataplane: vpp`, each with a real
VPP of its own, started inside the node's namespace by a command of the machine's, named in the
environment:

    VSWITCH_TEST_VPP_START        command starting a VPP: `$CMD NAME NETNS` (NETNS an `ip netns`
                                  name); returns once its API socket exists
    VSWITCH_TEST_VPP_STOP         command stopping it: `$CMD NAME`
    VSWITCH_TEST_VPP_MESH_SOCKET  the API socket of instance NAME, `{name}` standing for it
    VSWITCH_TEST_VPP_API_DIR      optional: VPP's .api.json folder (else fetched from the VPP)

`VppNodes.launch` is the one step that makes a node's VPP; the tests' fake VPPs
(tests/helpers/vpp_nodes.py) replace it, everything else is shared.
"""

from __future__ import annotations

import os
import secrets
import shlex
import subprocess
from typing import Any

from agent.dataplane.vpp.api import VppApi
from testbed.cluster import Cluster, Node

START_ENV = "VSWITCH_TEST_VPP_START"
STOP_ENV = "VSWITCH_TEST_VPP_STOP"
SOCKET_ENV = "VSWITCH_TEST_VPP_MESH_SOCKET"
API_DIR_ENV = "VSWITCH_TEST_VPP_API_DIR"
START = os.environ.get(START_ENV, "")
STOP = os.environ.get(STOP_ENV, "")
SOCKET = os.environ.get(SOCKET_ENV, "")
REAL_API_DIR = os.environ.get(API_DIR_ENV, "")
REAL_VPP = bool(START and STOP and SOCKET)
MISSING = f"{START_ENV}, {STOP_ENV} and {SOCKET_ENV} are not set (no real VPPs to start)"


class VppNodes:
    """Adds nodes to `cluster`, each with its own VPP; `close()` stops every VPP. Close the
    cluster first (pods deleted, agents stopped while their VPPs still run)."""

    def __init__(self, cluster: Cluster, prefix: str = "vsw") -> None:
        self.cluster = cluster
        self.prefix = prefix
        self.suffix = secrets.token_hex(2)
        self.started: list[str] = []  # real instances' names, stopped by close()
        self.sockets: dict[str, str] = {}  # node name -> API socket
        self.api_dirs: dict[str, str] = {}  # node name -> API definitions ("" from the VPP)
        self.names: dict[str, str] = {}  # node name -> VPP instance name

    def launch(self, node: Node, name: str) -> tuple[str, str]:
        """Starts VPP `name` in `node`'s namespace; returns its API socket and API folder."""
        self.started.append(name)  # before the start: a half-started VPP is stopped too
        out = subprocess.run([*shlex.split(START), name, node.netns], capture_output=True,
                             text=True, check=False, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"starting VPP {name}: {out.stdout} {out.stderr}".strip())
        return SOCKET.replace("{name}", name), REAL_API_DIR

    def add_node(self, start: bool = True, **extra: Any) -> Node:
        """A node with its own VPP; its agent started unless `start` is False."""
        node = self.cluster.add_node(start=False, **extra)
        name = f"{self.prefix}{node.index}{self.suffix}"
        socket, api_dir = self.launch(node, name)
        self.sockets[node.name], self.api_dirs[node.name] = socket, api_dir
        self.names[node.name] = name
        node.extra.update({"Dataplane": "vpp", "VPPAPISocket": socket, "VPPAPIDir": api_dir,
                           "UseTAPInterfaces": False})
        if start:
            node.start_agent()
        return node

    def restart(self, node: Node) -> None:
        """Stops `node`'s VPP and starts it again under the same name and socket (everything
        it held is gone; the agent notices and makes it again)."""
        name = self.names[node.name]
        subprocess.run([*shlex.split(STOP), name], capture_output=True, check=False, timeout=60)
        self.started.remove(name)
        self.launch(node, name)

    def close(self) -> None:
        for name in self.started:
            subprocess.run([*shlex.split(STOP), name], capture_output=True, check=False,
                           timeout=60)
        self.started.clear()

    def api(self, node: Node) -> VppApi:
        return VppApi(self.sockets[node.name], self.api_dirs[node.name] or None, 5.0, 10.0,
                      "vswitch-test")

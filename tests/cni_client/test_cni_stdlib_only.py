"""The plugin imports nothing but the standard library (its start-up cost is product).

Every cni_client module is imported in a fresh interpreter, and every module that appears beyond
those `python3 -c pass` already loads must be stdlib or cni_client itself. A whole ADD (and a
VERSION) run the way the installed plugin runs loads none of the stdlib modules that cost
milliseconds to import.
"""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import cni_client
from tests.cni_client.scripted_agent import ScriptedAgent

CHECKOUT = str(Path(__file__).resolve().parents[2])

PROBE = """
import importlib, json, sys
before = set(sys.modules)
for name in sys.argv[1:]:
    importlib.import_module(name)
new = sorted(set(sys.modules) - before)
print(json.dumps([m for m in new if m.split(".")[0] not in sys.stdlib_module_names
                  and m.split(".")[0] != "cni_client"]))
"""


def test_cni_client_imports_only_the_stdlib() -> None:
    modules = [f"cni_client.{m.name}" for m in pkgutil.iter_modules(cni_client.__path__)]
    assert "cni_client.grpc_unix" in modules and "cni_client.main" in modules
    proc = subprocess.run([sys.executable, "-c", PROBE, *modules], capture_output=True,
                          text=True, check=True, timeout=60)
    assert json.loads(proc.stdout) == []


HEAVY = ("json", "re", "socket", "hashlib", "enum", "selectors", "logging")
RUN_AND_LIST = """
import sys
sys.path.insert(0, sys.argv[1])
from cni_client.main import main
code = main()
print(" ".join(sorted(sys.modules)), file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.parametrize("command", ["ADD", "VERSION"])
def test_a_plugin_call_loads_none_of_the_heavy_modules(agent: ScriptedAgent,
                                                       command: str) -> None:
    """Start-up cost is product (issue #13): a whole ADD, answered by an agent, runs without the
    modules whose import costs milliseconds (json, re, socket, hashlib, ...). Run as installed:
    `-I -S`, the interpreter the plugin's shebang pins."""
    env = {"PATH": os.environ.get("PATH", ""), "CNI_COMMAND": command, "CNI_CONTAINERID": "c0",
           "CNI_NETNS": "/var/run/netns/pod", "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin"}
    conf = {"cniVersion": "1.1.0", "name": "vswitch", "type": "vswitch-cni",
            "agentSocket": agent.socket_path}
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", RUN_AND_LIST, CHECKOUT],
                          input=json.dumps(conf).encode(), env=env, capture_output=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["cniVersion"] == "1.1.0"
    loaded = set(proc.stderr.decode().split())
    assert "cni_client.main" in loaded
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))

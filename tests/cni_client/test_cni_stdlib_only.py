"""The plugin imports nothing but the standard library (its start-up cost is product).

Every cni_client module is imported in a fresh interpreter, and every module that appears beyond
those `python3 -c pass` already loads must be stdlib or cni_client itself.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import cni_client

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

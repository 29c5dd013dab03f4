"""A new user's first run: the main job works from a clean environment, and nothing of the
project stands on the tests or finds itself on PATH.

Test plan:
- the README's main job (`python -m demo_cluster --once`) in `env -i` with a plain PATH and HOME:
  every pod reaches every pod on the other nodes, and the namespaces it printed are gone;
- the test bed takes the plugin from beside the interpreter or from VSWITCH_BIN_DIR, never from
  PATH, and says what to run when it is missing;
- shipped code (agent, plugin, IPAM, CLI, test bed, benchmarks, demos) imports nothing of tests/,
  and no Python file of the project looks a program of its own up on PATH.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import tools
from testbed.tools import REPO

CLEAN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
SHIPPED = ["agent", "cni_client", "ipam", "policy", "services", "vswitchctl", "testbed",
           "benchmarks", "protos", "demo.py", "demo_cluster.py"]
OWN_PROGRAMS = {"vswitch-cni", "vswitch-agent", "vswitchctl"}


def _python_files(names: list[str]) -> list[Path]:
    files: list[Path] = []
    for name in names:
        path = REPO / name
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return files


def test_the_main_job_runs_in_a_clean_environment(tmp_path: Path) -> None:
    # What a new user types after `make setup`, with nothing of the project on PATH.
    env = {"PATH": CLEAN_PATH, "HOME": str(tmp_path)}
    out = subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in env.items()),
                          sys.executable, "-m", "demo_cluster", "--once"],
                         cwd=REPO, capture_output=True, text=True, timeout=280, check=False)
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    assert "all pods reached each other across nodes" in out.stdout
    pings = re.findall(r"^  node-\d/\S+ -> node-\d/\S+ +\S+ +(ok|FAILED)$", out.stdout, re.M)
    # 3 nodes x 2 pods, each pinging the 4 pods of the other nodes at 2 addresses
    assert pings == ["ok"] * 48, out.stdout
    made = set(re.findall(r"namespace (cnode\w+)", out.stdout))
    made |= set(re.findall(r"^  node-\d/(cp\w+):", out.stdout, re.M))
    assert len(made) == 3 + 6, out.stdout
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert made.isdisjoint(line.split()[0] for line in left.stdout.splitlines() if line)


def test_the_plugin_is_found_beside_the_interpreter_not_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A `vswitch-cni` on PATH (another checkout's, a global install) is never taken.
    decoy = tmp_path / "path"
    decoy.mkdir()
    (decoy / "vswitch-cni").write_text("#!/bin/sh\nexit 99\n")
    (decoy / "vswitch-cni").chmod(0o755)
    monkeypatch.setenv("PATH", f"{decoy}:{CLEAN_PATH}")
    monkeypatch.delenv(tools.BIN_DIR_ENV, raising=False)
    assert tools.plugin() == Path(sys.executable).parent / "vswitch-cni"

    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv(tools.BIN_DIR_ENV, str(empty))
    with pytest.raises(tools.NotInstalled) as missing:
        tools.plugin()
    assert "make setup" in str(missing.value) and tools.BIN_DIR_ENV in str(missing.value)

    monkeypatch.setenv(tools.BIN_DIR_ENV, str(decoy))  # an explicit setting is taken as given
    assert tools.plugin() == decoy / "vswitch-cni"


def test_a_missing_plugin_stops_the_demo_with_what_to_run(tmp_path: Path) -> None:
    env = {"PATH": CLEAN_PATH, "HOME": str(tmp_path), tools.BIN_DIR_ENV: str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "demo_cluster", "--once"], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode != 0
    assert "vswitch-cni is not installed" in out.stderr and "make setup" in out.stderr
    assert "Traceback" not in out.stderr


def test_shipped_code_imports_nothing_of_the_tests() -> None:
    files = _python_files(SHIPPED)
    assert len(files) > 100, files
    hits = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            hits += [f"{path.relative_to(REPO)}:{node.lineno} {n}" for n in names
                     if n == "tests" or n.startswith("tests.")]
    assert hits == []


def test_no_program_of_the_project_is_looked_up_on_path() -> None:
    hits = []
    for path in _python_files([*SHIPPED, "tests"]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "which" and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value in OWN_PROGRAMS):
                hits.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert hits == []


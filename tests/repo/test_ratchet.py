"""The repo's own ratchet: production modules stay small, and the import rules stay kept.

Test plan:
- no module of the shipped packages passes MAX_LINES (generated protobuf code aside), nor one of
  the benchmarks; a module that must grow is split by responsibility first (docs/architecture.md
  says where things go); the benchmarks sit in their rooms, nothing loose beside them;
- the import contracts of pyproject.toml ([tool.importlinter]: the agent's wings import downward
  only, cluster and dataplane never import each other, no circle, ipam pure, the plugin a shim,
  only tests import tests, the benchmarks' rooms never import each other) are kept:
  `lint-imports` runs in `make lint` too, this test makes a crossing fail the suite as well, with
  the contract's own report;
- the contracts really cover the agent: every package under agent/ is a layer of the contract.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from testbed.tools import REPO

MAX_LINES = 400
SHIPPED = ["agent", "ipam", "policy", "services", "cni_client", "vswitchctl", "protos", "testbed"]
BENCHMARK_ROOMS = ["core", "cni", "traffic", "policy", "soak", "scale"]


def _modules() -> list[Path]:
    return [p for name in SHIPPED for p in sorted((REPO / name).rglob("*.py"))
            if "_pb2" not in p.name and "__pycache__" not in p.parts]


def test_no_production_module_passes_the_line_limit() -> None:
    modules = _modules()
    assert len(modules) > 80, modules  # the scan covered the tree
    long = {str(p.relative_to(REPO)): n for p in modules
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"split these by responsibility (limit {MAX_LINES} lines): {long}"


def test_no_benchmark_module_passes_the_line_limit_and_every_one_sits_in_a_room() -> None:
    root = REPO / "benchmarks"
    modules = [p for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts]
    long = {str(p.relative_to(REPO)): n for p in modules
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"split these by responsibility (limit {MAX_LINES} lines): {long}"
    # the rooms, and nothing loose beside them but the package's entry points
    loose = {p.name for p in root.glob("*.py")} - {"__init__.py", "__main__.py"}
    assert loose == set(), loose
    rooms = {p.parent.name for p in root.glob("*/__init__.py")}
    assert rooms == set(BENCHMARK_ROOMS), rooms


def test_the_import_contracts_are_kept() -> None:
    tool = Path(sys.executable).parent / "lint-imports"
    out = subprocess.run([str(tool), "--no-cache"], cwd=REPO, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "BROKEN" not in out.stdout and "KEPT" in out.stdout


def test_every_wing_of_the_agent_is_a_layer() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in config["contracts"]
                 if c["type"] == "layers" and c["containers"] == ["agent"]]
    named = {part.strip() for layer in layers["layers"] for part in layer.split("|")}
    packages = {p.parent.name for p in (REPO / "agent").glob("*/__init__.py")}
    modules = {p.stem for p in (REPO / "agent").glob("*.py")} - {"__init__"}
    # every package is a wing; top-level modules are entry points or the installer
    assert packages <= named, packages - named
    assert modules - named <= {"install_files"}, modules - named

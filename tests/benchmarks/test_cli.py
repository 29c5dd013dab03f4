"""`python -m benchmarks`: the one way in (benchmarks/__main__.py, benchmarks.core.catalog).

Test plan:
- `list` names every benchmark of the catalog, one line each, with its room;
- every catalog entry names a module that exists, in the room it claims; those that write a
  section take --out (their `--help` says so);
- `run NAME --quick --out FILE` runs the benchmark's smoke run into FILE, stamped, under the
  headline; a quick run never writes the repository's BENCHMARKS.md; an unknown name is refused
  with the known ones; `run` needs a name or --all, not both.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.core.catalog import CATALOG, Benchmark
from testbed.tools import REPO


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_list_names_every_benchmark_once() -> None:
    out = _cli("list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == len(CATALOG)
    for bench, line in zip(CATALOG, lines, strict=True):
        assert line.split()[:2] == [bench.name, bench.room]


def test_every_entry_names_a_module_of_its_room() -> None:
    for bench in CATALOG:
        assert importlib.util.find_spec(bench.module) is not None, bench.module
        prefix = "tests." if bench.room == "tests" else f"benchmarks.{bench.room}."
        assert bench.module.startswith(prefix), bench
        if bench.section:
            help_text = subprocess.run([sys.executable, "-m", bench.module, "--help"], cwd=REPO,
                                       capture_output=True, text=True, timeout=60,
                                       check=False).stdout
            assert "--out" in help_text, bench.name


def test_a_quick_run_writes_its_stamped_section_under_the_headline(tmp_path: Path) -> None:
    out = tmp_path / "quick.md"
    proc = _cli("run", "policy-compile", "--quick", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert text.startswith("# Benchmarks\n")
    assert "<!-- policy-compile: begin" in text and "<!-- measured: commit=" in text
    assert "*Measured on commit" in text  # fresh: nothing changed since this very run
    assert "20 policies over 202 pods" in text


def test_bad_invocations_are_refused() -> None:
    proc = _cli("run", "no-such-bench", "--quick")
    assert proc.returncode == 2 and "no benchmark 'no-such-bench'" in proc.stderr
    assert "policy-compile" in proc.stderr  # the known names
    proc = _cli("run", "cni", "--quick", "--out", str(REPO / "BENCHMARKS.md"))
    assert proc.returncode == 2 and "must not replace BENCHMARKS.md" in proc.stderr
    assert _cli("run", "--quick").returncode == 2
    assert _cli("run", "cni", "--all").returncode == 2


@pytest.mark.parametrize("bench", [b for b in CATALOG if b.quick is not None],
                         ids=lambda b: b.name)
def test_every_quick_invocation_parses(bench: object) -> None:
    """The smoke arguments are ones the module accepts, checked without running it: their values
    parse (argparse exits 2 on a bad one before it reaches `--help`) and every option is in the
    module's help."""
    assert isinstance(bench, Benchmark) and bench.quick is not None
    proc = subprocess.run([sys.executable, "-m", bench.module, *bench.quick, "--help"],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for option in (a for a in bench.quick if a.startswith("--")):
        assert option in proc.stdout, (bench.name, option)

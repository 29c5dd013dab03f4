"""The policy compiler benchmark, small, so that it cannot rot (no timing is asserted).

Test plan: `benchmarks.policy.compiler.run` on 300 pods and 60 policies gives every figure (parse,
compile of every pod, compile of one node's pods) with min <= median, and a result whose size
matches the input (every pod of a namespace with a default deny is isolated); the CLI prints
min and median of each.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.policy import compiler

REPO = Path(__file__).resolve().parents[2]


def test_the_figures_are_all_there() -> None:
    figures = compiler.run(n_pods=300, n_policies=60, runs=2)
    assert figures["pods"] == 302 and figures["policies"] == 60  # + kube-system's DNS pods
    for name in ("parse", "compile_all", "compile_one_node"):
        assert figures[name]["n"] == 2
        assert 0 < figures[name]["min"] <= figures[name]["median"]
    assert figures["isolated_pods"] == 300 and figures["rules"] > 0 and figures["cidrs"] > 0


def test_the_command_prints_min_and_median() -> None:
    out = subprocess.run([sys.executable, "-m", "benchmarks.policy.compiler", "--pods", "200",
                          "--policies", "20", "--runs", "1"], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=True)
    assert "20 policies over 202 pods" in out.stdout
    assert out.stdout.count("median") == 3, out.stdout

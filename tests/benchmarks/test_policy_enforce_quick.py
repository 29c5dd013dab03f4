"""benchmarks/policy/enforce.py (NetworkPolicy on a node, end to end, issue #24) in miniature on
the kernel dataplane, so that it cannot rot: a real kube-apiserver (VSWITCH_TEST_KUBE_APISERVER;
skipped without one), three policy changes each way, the section and its picture checked. No
timing is asserted.

Test plan:
- `python -m benchmarks.policy.enforce` with 3 changes, 3 live pods, 2 measured ADDs and the
  kernel dataplane only exits 0 and writes its section between its markers into an existing
  file, the rest of the file kept; each of the 6 changes got its verdict (measured, or counted
  as missed).
- Its picture, docs/benchmarks/policy-enforce.svg beside the markdown file, is a valid SVG with
  both changes (created → denied, deleted → allowed) and the kernel dataplane as a series, and
  the section shows it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.core.plots import plot_dir, svg_series
from benchmarks.policy.enforce_report import BEGIN, END
from testbed.tools import REPO

APISERVER = os.environ.get("VSWITCH_TEST_KUBE_APISERVER", "")
ARGS = ("--changes", "3", "--live", "3", "--measured", "2", "--api-pods", "20",
        "--api-policies", "3", "--dataplanes", "kernel", "--seconds", "1", "--pings", "5")


@pytest.mark.skipif(not APISERVER or not os.path.exists(APISERVER),
                    reason="needs a kube-apiserver binary in VSWITCH_TEST_KUBE_APISERVER")
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, links)")
def test_a_small_kernel_run_reports_enforcement_and_draws_it(tmp_path: Path) -> None:
    out, data = tmp_path / "q.md", tmp_path / "f.json"
    out.write_text("# Benchmarks\n\nother figures\n")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.policy.enforce", *ARGS, "--out", str(out),
         "--json", str(data)],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    enforce = json.loads(data.read_text())["kernel"]["enforce"]
    assert len(enforce["deny"]) + len(enforce["allow"]) + enforce["missed"] == 2 * 3
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nother figures\n")
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    section = text[text.index(BEGIN):text.index(END)]
    assert "| kernel | created: denied |" in section

    picture = plot_dir(out) / "policy-enforce.svg"
    assert picture.parent == tmp_path / "docs" / "benchmarks"
    assert {"created → denied", "deleted → allowed", "kernel"} <= svg_series(picture)
    assert "](docs/benchmarks/policy-enforce.svg)" in section

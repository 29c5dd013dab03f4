"""benchmarks/traffic/one_node.py (pod-to-pod traffic on one node, issue #18) in quick mode, so
that it cannot rot: CI runs it without a VPP and checks the section and its picture. No number
is asserted beyond being one.

Test plan:
- `python -m benchmarks.traffic.one_node --quick --out <tmp>/q.md`, as root with iperf3 and no
  VSWITCH_TEST_VPP_SOCKET, exits 0 and writes its section between its markers into an existing
  file, the rest of the file kept: the floor (a bare veth pair) and the kernel dataplane measured
  (TCP Gbit/s, RTT and UDP loss numbers), the VPP row "not measured".
- Its picture, docs/benchmarks/traffic.svg beside the markdown file, is a valid SVG with the
  floor and the kernel dataplane as series, and the section shows it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.core.plots import plot_dir, svg_series
from benchmarks.traffic.one_node import BEGIN, END, VPP_ENV
from testbed.tools import REPO

NUMBER = re.compile(r"^\d+(\.\d+)?$")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("iperf3") is None,
                    reason="needs root (namespaces) and iperf3")
def test_the_quick_run_measures_the_floor_and_the_kernel_and_draws_them(tmp_path: Path) -> None:
    out = tmp_path / "q.md"
    out.write_text("# Benchmarks\n\nother figures\n")
    env = {k: v for k, v in os.environ.items() if k != VPP_ENV}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.traffic.one_node", "--quick", "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nother figures\n")
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    section = text[text.index(BEGIN):text.index(END)]
    rows = {cells[0]: cells[1:] for line in section.splitlines() if line.startswith("| ")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}
    for setup in ("bare veth pair (floor)", "kernel dataplane"):
        tcp, rtt, loss = rows[setup][:3]
        assert all(NUMBER.match(cell) for cell in (tcp, rtt, loss)), rows[setup]
    assert rows["VPP dataplane"][0].startswith("not measured")

    picture = plot_dir(out) / "traffic.svg"
    assert picture.parent == tmp_path / "docs" / "benchmarks"
    assert {"TCP, one stream", "RTT", "bare veth pair", "kernel dataplane"} <= svg_series(picture)
    assert "](docs/benchmarks/traffic.svg)" in section

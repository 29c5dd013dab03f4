"""benchmarks/traffic/encryption.py (WireGuard against clear across two nodes, issue #41), so that
it cannot rot: the quick run measures both setups and its section says what ran.

Test plan: `python -m benchmarks.traffic.encryption --quick --setup clear --setup wireguard
--out <tmp>` (the kernel dataplane's pair; the VPP pair needs real VPPs) exits 0 and writes its
section between its markers: both setups measured, the `wireguard` one naming the WireGuard the
agent ran (wireguard-go on a kernel without the module), every row across nodes with a number for
both and a ratio, and Gbit/s per busy CPU for both. No figure is judged: a smoke run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.traffic.encryption import BEGIN, END

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("wireguard-go") is None or shutil.which("iperf3") is None,
                    reason="needs wireguard-go, wg and iperf3 (make setup)")
def test_quick_run_writes_both_setups(tmp_path: Path) -> None:
    out = tmp_path / "BENCH.md"
    done = subprocess.run([sys.executable, "-m", "benchmarks.traffic.encryption", "--quick",
                           "--setup", "clear", "--setup", "wireguard", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = out.read_text()
    section = text[text.index(BEGIN):text.index(END)]
    assert re.search(r"- `clear` \(.*\): measured in", section)
    wireguard = re.search(r"- `wireguard` \((.*)\): measured in", section)
    assert wireguard is not None and "WireGuard: wireguard-go" in wireguard.group(1)
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0].startswith("| row (across nodes) | `clear` | `wireguard` | / `clear` |")
    labels = {row.split(" | ")[0] for row in rows[1:]}
    assert {"| TCP Gbit/s, pod -> pod, across nodes, IPv4", "| RTT ms, pod -> pod, across nodes, "
            "IPv4", "| Gbit/s per busy CPU (one more TCP IPv4 run)"} <= labels
    for row in rows[1:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert re.match(r"^[\d.]+", cells[1]) and re.match(r"^[\d.]+", cells[2]), row
        assert re.search(r"[\d.]+ ?x|points", cells[3]), row

"""The soak (benchmarks/soak) in miniature on the kernel dataplane, so that it cannot rot: CI
runs it and checks the report and the leak counts. No timing is asserted.

Test plan:
- `python -m benchmarks run soak --dataplane kernel` with 4 pods and 20 cycles exits 0 (every check
  passed, nothing leaked) and writes its section into an existing markdown file between its
  markers, leaving the file's other text as it was; a second run replaces the section.
- The JSON has a sample per window, every leak count is 0 with the live pods up and after the
  last DEL, and the report has the slopes, latency and leak tables.
- Its picture, docs/benchmarks/soak.svg beside the markdown file, is a valid SVG with the
  trends (RSS, fds, ADD and DEL latency) of the kernel dataplane, and the section shows it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.core.plots import plot_dir, svg_series
from benchmarks.soak.report import BEGIN, END

REPO = Path(__file__).resolve().parents[2]


def soak(out: Path, data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.soak.run", "--dataplane", "kernel", "--pods", "4",
         "--cycles", "20", "--window", "5", "--out", str(out), "--json", str(data)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )


def test_a_short_kernel_soak_leaks_nothing_and_reports_in_its_section(tmp_path: Path) -> None:
    out, data = tmp_path / "BENCHMARKS.md", tmp_path / "soak.json"
    out.write_text("# Benchmarks\n\nother figures\n")
    proc = soak(out, data)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (run,) = json.loads(data.read_text())["runs"]
    assert run["dataplane"] == "kernel" and run["cycles"] == 20 and run["failures"] == 0
    assert [w["cycle"] for w in run["windows"]] == [0, 5, 10, 15, 20]
    for counts in (run["leaks_live"], run["leaks_empty"]):
        assert counts["links_dead_pods"] == 0 and counts["routes_dead_pods"] == 0
    assert run["leaks_live"]["allocations"] == 4 and run["leaks_empty"]["allocations"] == 0
    assert run["leaks_empty"]["etcd_pods"] == 0 and run["leaks_empty"]["etcd_ipam"] == 0
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nother figures\n")
    section = text[text.index(BEGIN):text.index(END)]
    for heading in ("## Soak: pod churn", "### kernel dataplane", "| figure |", "| verb |",
                    "| leak count |", "python -m benchmarks run soak --dataplane kernel"):
        assert heading in section, heading
    picture = plot_dir(out) / "soak.svg"
    assert {"agent RSS", "agent open fds", "ADD latency, window median",
            "DEL latency, window median", "kernel"} <= svg_series(picture)
    assert "](docs/benchmarks/soak.svg)" in section
    assert soak(out, data).returncode == 0
    again = out.read_text()
    assert again.count(BEGIN) == 1 and again.count(END) == 1
    assert again.startswith("# Benchmarks\n\nother figures\n")

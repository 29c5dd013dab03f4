"""The benchmark suite in quick mode, so that it cannot rot: CI runs it and checks that the
report is complete. No timing is asserted: numbers on a shared CI machine mean nothing; that the
suite still measures every figure does.

Test plan:
- `python -m benchmarks run cni --quick --out <tmp>` exits 0 and writes its section there, under
  the headline table, whose CNI rows hold ours against the reference plugins.
- Every part of issues #7 and #13 is present: machine, versions, targets, figures 1-8 (VPP: a
  table or the "not measured" line).
- Every row of every statistics table has an integer n >= 1 and numeric min / median / p99,
  ordered min <= median <= p99.
- The targets table lists the targets of issue #13 (and #7's ADD p99 and RSS), each with a
  numeric measured value and a verdict (met / missed), then the VPP ones when a VPP runs; the
  ratio table has ADD, CHECK and DEL with numeric ratios.
- The node-ID race found every ID unique.
- Figure 1's picture (docs/benchmarks/cni-latency.svg beside the report) is a valid SVG with
  ADD, CHECK and DEL, ours (vswitch-cni) against bridge+host-local, and the report shows it.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

from benchmarks.core.plots import plot_dir, svg_series

REPO = Path(__file__).resolve().parents[2]
SEPARATOR = re.compile(r"^\|\s*-{3,}\s*\|")
SECTIONS = [
    "## The CNI path", "### Machine", "### Versions", "### Targets (issue #13, with #7's)",
    "### 1. CNI ADD / CHECK / DEL latency through libcni (sequential)", "#### VPP dataplane",
    "#### Where an ADD's time goes", "### 2. Throughput", "### 3. Plugin executable cost",
    "### 4. Reconcile after an agent restart", "### 5. Node-ID allocation", "### 6. IPAM core",
    "### 7. Agent memory", "### 8. A full node",
]
TARGETS = ["ADD median / reference ADD median", "ADD p99", "DEL median / reference DEL median",
           "pods/s, 16 concurrent ADDs / reference", "plugin exec median",
           "total CPU per pod ADD", "reconcile of", "agent RSS with"]


def tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every markdown table: (header cells, rows of cells)."""
    out: list[tuple[list[str], list[list[str]]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and SEPARATOR.match(lines[i + 1]):
            header = [c.strip() for c in lines[i].strip("|").split("|")]
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip("|").split("|")])
                i += 1
            out.append((header, rows))
        else:
            i += 1
    return out


def number(cell: str) -> float:
    match = re.match(r"^-?\d+(\.\d+)?", cell)
    assert match, f"not a number: {cell!r}"
    value = float(match.group(0))
    assert math.isfinite(value), cell
    return value


def test_quick_mode_writes_a_complete_report(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.quick.md"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "run", "cni", "--quick", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    text = out.read_text()

    # figure 1's picture, beside the report and shown in it: ours and the reference, per verb
    picture = plot_dir(out) / "cni-latency.svg"
    assert picture.parent == tmp_path / "docs" / "benchmarks"
    assert {"ADD", "CHECK", "DEL", "vswitch-cni", "bridge+host-local"} <= svg_series(picture)
    assert "](docs/benchmarks/cni-latency.svg)" in text

    for section in SECTIONS:
        assert section in text, f"missing section {section!r}"
    assert "python -m benchmarks run cni --quick" in text
    headline = text[:text.index("<!-- cni: begin")]
    for figure in ("CNI ADD, kernel dataplane (median)", "CNI DEL, kernel dataplane (median)",
                   "pods/s with 16 runtimes at once (median)"):
        (entry,) = [line for line in headline.splitlines() if line.startswith(f"| {figure} |")]
        assert "bridge+host-local" in entry and re.search(r"\| \d+\.\d\dx \|", entry), entry

    all_tables = tables(text)
    stats = [rows for header, rows in all_tables if header == ["figure", "n", "min", "median",
                                                               "p99", "unit"]]
    assert len(stats) >= 7, "expected a statistics table per figure"
    for rows in stats:
        assert rows
        for row in rows:
            assert int(row[1]) >= 1, row
            low, mid, high = (number(c) for c in row[2:5])
            assert low <= mid <= high, row

    (targets,) = [rows for header, rows in all_tables if header[0] == "target"]
    assert len(targets) >= len(TARGETS)
    assert all(row[0].startswith("VPP") for row in targets[len(TARGETS):])  # with a real VPP
    for name, row in zip(TARGETS, targets[:len(TARGETS)], strict=True):
        assert row[0].startswith(name), row
        number(row[1])
        assert row[3].startswith(("met", "**missed**")), row

    (ratios,) = [rows for header, rows in all_tables if header[:2] == ["verb",
                                                                        "ratio of medians"]]
    assert [row[0] for row in ratios] == ["ADD", "CHECK", "DEL"]
    for row in ratios:
        number(row[1])
        number(row[2])

    assert "all unique" in text and "DUPLICATES" not in text
    vpp = text.split("#### VPP dataplane", 1)[1].split("###", 1)[0]
    assert "not measured" in vpp or "vswitch-cni (vpp)" in vpp

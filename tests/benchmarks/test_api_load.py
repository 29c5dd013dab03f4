"""benchmarks/scale/apiserver.py (what N agents' watches cost the API server, issue #39 item 5).

Test plan:
- its section from made-up figures: one row per watcher count, the growth against the first
  row per watcher, the picture linked, between its markers; the picture is a valid SVG with its
  panels;
- with a kube-apiserver (VSWITCH_TEST_KUBE_APISERVER; skipped without): the quick run through
  `python -m benchmarks run api-load --quick` exits 0, every watcher count listed the cluster,
  the API server sent bytes for the lists and under the events, and the section and its
  picture are written beside --out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.core.plots import svg_series
from benchmarks.scale.apiserver import BEGIN, END, plot, section
from testbed.kube import ENV
from testbed.tools import REPO


def _row(agents: int, kib: float) -> dict[str, float]:
    return {"agents": agents, "sync_s": 1.0 + agents, "sync_api_cpu_s": 0.5 * agents,
            "sync_sent_mib": 2.0 * agents, "events": 100, "events_per_s": 20.0,
            "churn_api_cpu_share": 0.01 * agents, "churn_sent_kib_per_s": kib,
            "watcher_rss_mib": 60.0}


FIGURES: dict[str, Any] = {
    "started": "2026-11-28 23:00 UTC", "load_start": "0.1 0.1 0.1", "load_end": "0.2 0.2 0.2",
    "machine": {"CPU": "test", "cores (os.cpu_count)": "2"},
    "api": {"nodes": 5, "pods": 300, "namespaces": 2, "policies": 10, "services": 5},
    "rows": [_row(1, 10.0), _row(10, 100.0), _row(50, 500.0)],
}


def test_its_section_and_picture_from_made_up_figures(tmp_path: Path) -> None:
    text = section(FIGURES, "python -m benchmarks run api-load", "![p](docs/benchmarks/x.svg)")
    assert text.startswith(BEGIN) and text.rstrip().endswith(END)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert [r.split("|")[1].strip() for r in rows[1:]] == ["1", "10", "50"]
    assert rows[3].split("|")[9].strip() == "1.00"  # 500/50 per watcher = 10/1: constant
    assert "grow 50.0x" in text and "![p](docs/benchmarks/x.svg)" in text
    picture = plot(FIGURES, tmp_path / "api-load.svg")
    assert {"API server", "watchers", "sent for the lists (MiB)"} <= svg_series(picture)


@pytest.mark.skipif(not os.environ.get(ENV), reason=f"{ENV} names no kube-apiserver")
def test_the_quick_run_measures_every_watcher_count(tmp_path: Path) -> None:
    out, data = tmp_path / "B.md", tmp_path / "api.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "run", "api-load", "--quick",
                           "--out", str(out), "--json", str(data)], cwd=REPO,
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = json.loads(data.read_text())["rows"]
    assert [r["agents"] for r in rows] == [1, 2]
    for row in rows:
        assert row["sync_sent_mib"] > 0 and row["churn_sent_kib_per_s"] > 0, row
        assert row["events"] > 0, row
    assert rows[1]["sync_sent_mib"] > rows[0]["sync_sent_mib"]  # two listed it all
    text = out.read_text()
    assert BEGIN in text and "](docs/benchmarks/api-load.svg)" in text
    assert "API server" in svg_series(tmp_path / "docs" / "benchmarks" / "api-load.svg")

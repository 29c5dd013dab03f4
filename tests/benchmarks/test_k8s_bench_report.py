"""The pure side of tests/k8s_tier/bench.py (the real-cluster benchmark): its table and its
section of BENCHMARKS.md. The measurements themselves need a cluster (docs/k8s-tier.md)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.core.sections import STAMP, write_section
from tests.k8s_tier.bench import BEGIN, END, Rows, table


def test_the_table_shows_medians_runs_and_the_ratio() -> None:
    kernel, vpp = Rows("kernel"), Rows("vpp")
    for value in (10.0, 12.0, 11.0):
        kernel.add("TCP (Gbit/s)", value)
    for value in (5.0, 6.0, 7.0):
        vpp.add("TCP (Gbit/s)", value)
    vpp.failures.append("RuntimeError: iperf3 to 10.1.1.2: refused")
    out = table([kernel, vpp]).splitlines()
    assert out[0] == "| figure | kernel (median; runs) | vpp (median; runs) | vpp / kernel |"
    assert out[2] == "| TCP (Gbit/s) | 11 (10, 12, 11) | 6 (5, 6, 7) | 0.55x |"
    assert out[-1] == "vpp: failed: RuntimeError: iperf3 to 10.1.1.2: refused"


def test_a_loss_is_compared_in_points() -> None:
    kernel, vpp = Rows("kernel"), Rows("vpp")
    kernel.add("UDP loss (%)", 14.9)
    vpp.add("UDP loss (%)", 54.7)
    assert table([kernel, vpp]).splitlines()[2].endswith("| +39.8 points |")


def test_a_figure_one_dataplane_lacks_has_no_ratio() -> None:
    kernel, vpp = Rows("kernel"), Rows("vpp")
    kernel.add("RTT (ms)", 0.1)
    assert table([kernel, vpp]).splitlines()[2] == "| RTT (ms) | 0.1 (0.1) | - | - |"


def test_the_section_replaces_its_own_and_leaves_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\nbefore\n")
    write_section(path, f"{BEGIN}\nfirst\n{END}\n", BEGIN, END)
    write_section(path, f"{BEGIN}\nsecond\n{END}\n", BEGIN, END)
    text = path.read_text()
    assert STAMP.search(text) is not None  # what it measured, under its begin marker
    assert STAMP.sub("", text) == f"# Benchmarks\n\nbefore\n\n{BEGIN}\nsecond\n{END}\n"

"""benchmarks/traffic/vpp_core.py (pod traffic when VPP has a CPU of its own, issue #25), so that it
cannot rot: CI runs its quick mode on the kernel setups (a VPP setup is skipped without the real-VPP
variables) and checks the report; the placement with real processes; the report's pure parts
with made-up results. No timing is asserted.

Test plan:
- `python -m benchmarks run vpp-core --quick --setup kernel --setup kernel-any-cpu --setup
  kernel-2-nodes --setup vpp-own-core`, without the VPP variables, exits 0: the one-node kernel
  setups measure every one-node row once, the two-node one every row across once, the VPP
  setup is skipped with the reason; each setup says where it ran and how busy each CPU was;
  the section lands between its markers in an existing file, the rest of the file kept; no
  namespace of its own is left. Each measured setup has a Gbit/s per busy CPU, and the picture
  (docs/benchmarks/vpp-core.svg beside the file, shown in the section) has every measured setup
  in its TCP and per-busy-CPU panels, the skipped one in none.
- `placed`: a process started inside runs on the CPU given, the caller's affinity is back
  afterwards (also when the body raises); `move` moves every thread of a real process.
- The command refuses the same CPU for the pods and VPP, and a CPU the process may not use.
- The report: the ratios are over the kernel setup of the same node count (UDP: points), a
  row nobody measured is left out, a skipped setup says so; `busy` from two /proc/stat
  readings.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.core.plots import plot_dir, svg_series
from benchmarks.core.sections import STAMP
from benchmarks.traffic.mesh_report import QUICK, SetupResult
from benchmarks.traffic.vpp_core import (
    ACROSS_ROWS,
    BEGIN,
    END,
    ONE_NODE_ROWS,
    PER_CPU,
    SETUPS,
    busy,
    move,
    parse,
    placed,
    render,
)
from testbed.tools import REPO
from tests.benchmarks.test_mesh_traffic import HEADER, namespaces_of

CPUS = sorted(os.sched_getaffinity(0))
two_cpus = pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs this process may use")


@two_cpus
def test_the_quick_kernel_run_measures_the_one_node_rows_and_skips_vpp(tmp_path: Path) -> None:
    out, data = tmp_path / "BENCHMARKS.md", tmp_path / "core.json"
    out.write_text("# Benchmarks\n\nother figures\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VSWITCH_TEST_VPP")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.traffic.vpp_core", "--quick", "--setup", "kernel",
         "--setup", "kernel-any-cpu", "--setup", "kernel-2-nodes", "--setup", "vpp-own-core",
         "--pods-cpu", str(CPUS[0]),
         "--vpp-cpu", str(CPUS[1]), "--out", str(out), "--json", str(data)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-4000:]
    assert namespaces_of(proc.pid) == []
    kernel, anywhere, vpp, two = json.loads(data.read_text())["setups"]  # in SETUPS order
    for setup, rows in ((kernel, ONE_NODE_ROWS), (anywhere, ONE_NODE_ROWS), (two, ACROSS_ROWS)):
        assert setup["status"] == "ok" and setup["errors"] == {}
        assert {k: len(v) for k, v in setup["values"].items()} == {r.key: 1 for r in rows}
        assert re.fullmatch(r"(cpu\d+ \d+ %, )+cpu\d+ \d+ %",
                            setup["config"]["CPUs busy during one more TCP IPv4 run"])
    assert kernel["config"]["placement"] == two["config"]["placement"] == f"pods on CPU {CPUS[0]}"
    assert anywhere["config"]["placement"] == "pods on any CPU"
    assert vpp["status"] == "skipped" and "VSWITCH_TEST_VPP_START" in vpp["note"]
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nother figures\n")
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    section = text[text.index(BEGIN):text.index(END)]
    # the picture: every measured setup's TCP medians, and its Gbit/s per busy CPU
    assert all(setup["config"][PER_CPU] > 0 for setup in (kernel, anywhere, two))
    texts = svg_series(plot_dir(out) / "vpp-core.svg")
    assert {"TCP on one node, one stream (median)", "TCP across nodes, one stream (median)",
            "Gbit/s per busy CPU", "kernel", "kernel-any-cpu", "kernel-2-nodes"} <= texts
    assert "vpp-own-core" not in texts  # skipped: nothing to draw
    assert "](docs/benchmarks/vpp-core.svg)" in section
    assert "## Pod traffic when VPP has a CPU of its own" in section
    assert STAMP.sub("", section) in stdout  # printed as written, but for the stamp
    assert "across nodes" in section and "`kernel-2-nodes`" in section


@two_cpus
def test_placed_pins_what_starts_inside_and_gives_the_caller_its_cpus_back() -> None:
    before = os.sched_getaffinity(0)
    read = ["sh", "-c", "grep Cpus_allowed_list /proc/self/status"]
    with placed({CPUS[1]}):
        inside = subprocess.run(read, capture_output=True, text=True, check=True).stdout
    assert inside.split()[-1] == str(CPUS[1])
    assert os.sched_getaffinity(0) == before
    with pytest.raises(RuntimeError), placed({CPUS[0]}):
        raise RuntimeError("the body failed")
    assert os.sched_getaffinity(0) == before
    with placed(None):
        assert os.sched_getaffinity(0) == before


@two_cpus
def test_move_puts_every_thread_of_a_process_on_the_cpu() -> None:
    code = "import threading,time; [threading.Thread(target=time.sleep, args=(30,)).start() " \
           "for _ in range(2)]; print('up', flush=True); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        assert move(proc.pid, {CPUS[1]}) == str(CPUS[1])
        tids = os.listdir(f"/proc/{proc.pid}/task")
        assert len(tids) == 3
        assert all(os.sched_getaffinity(int(t)) == {CPUS[1]} for t in tids)
    finally:
        proc.kill()
        proc.wait()


def test_the_command_refuses_one_cpu_for_both_and_a_cpu_it_may_not_use(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["--quick", "--pods-cpu", str(CPUS[0]), "--vpp-cpu", str(CPUS[0])])
    assert "must differ" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse(["--quick", "--vpp-cpu", "4096"])
    assert "--vpp-cpu 4096: not a CPU" in capsys.readouterr().err


def test_the_report_compares_every_setup_with_the_kernel_on_the_pods_cpu() -> None:
    def result(name: str, scale: float) -> SetupResult:
        r = SetupResult(name, {"placement": "pods on CPU 0"})
        r.values = {row.key: [scale * (i + 1)] for i, row in enumerate(ONE_NODE_ROWS)}
        return r

    header = {**HEADER, "counts": QUICK}
    text = render(header, [result("kernel", 1.0), result("vpp-own-core", 0.5),
                           SetupResult("vpp-shared", {}, status="skipped", note="no VPP")])
    rows = [line for line in text.splitlines() if line.startswith(("| TCP", "| RTT", "| UDP"))]
    assert len(rows) == len(ONE_NODE_ROWS) == 5  # nobody measured the rows across
    assert rows[0].split(" | ")[1:] == ["1.00", "0.50", "0.50 x", "skipped", "- |"]
    assert "-2.50 points" in rows[4]  # 2.5 - 5.0
    # across nodes the kernel setup of two nodes is the baseline
    two = SetupResult("kernel-2-nodes", {})
    two.values = {row.key: [2.0] for row in ACROSS_ROWS}
    vpp_two = SetupResult("vpp-own-core-2-nodes", {})
    vpp_two.values = {row.key: [1.0] for row in ACROSS_ROWS}
    labels = tuple(f"| {row.label} |" for row in ACROSS_ROWS)
    across = [line for line in render(header, [result("kernel", 1.0), two, vpp_two]).splitlines()
              if line.startswith(labels)]
    assert len(across) == len(ACROSS_ROWS) == 5
    assert across[0].split(" | ")[1:] == ["-", "2.00", "1.00", "0.50 x |"]
    assert any(line.endswith("| -1.00 points |") for line in across)
    assert busy({"cpu0": (100, 50), "cpu1": (100, 90)},
                {"cpu0": (200, 50), "cpu1": (300, 190)}) == "cpu0 100 %, cpu1 50 %"
    assert "skipped: no VPP" in text and text.startswith(BEGIN) and text.rstrip().endswith(END)
    names = [s.name for s in SETUPS]
    assert names[0] == "kernel" and len(set(names)) == len(names)
    assert all((s.config["Dataplane"] == "vpp") == bool(s.vpp) for s in SETUPS)

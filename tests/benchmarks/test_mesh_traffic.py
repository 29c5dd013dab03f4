"""benchmarks/traffic/mesh.py (pod traffic with the node mesh on, issue #25), so that it cannot rot:
CI runs its quick mode on the kernel setup and checks the report; its pure parts with made-up
results. No timing is asserted.

Test plan:
- `python -m benchmarks run mesh-traffic --quick --setup kernel` exits 0, measures every row (one
  value each, TCP rows with their retransmits), writes its section between its markers into an
  existing file and leaves the rest of the file as it was (a second run replaces the section),
  and leaves no namespace of its own behind.
- A setup whose agents refuse to start (a config key the agent does not know) is a failed
  setup with the agent's reason, not an exception; nothing of it is left.
- The report: every row says "mesh on"; a VPP setup's column has its ratio to the kernel's
  median (UDP loss: the difference in points); a failed setup shows its reason and "failed"
  cells, a skipped one its note; a row that broke is marked and explained.
- The setups table: names unique, the baseline first, VPP setups asking for `Dataplane: vpp`
  and naming their VXLANOwner (the agent's default may change); the ring setups spell out
  every frame count.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from benchmarks.core.sections import STAMP
from benchmarks.traffic.mesh import SETUPS, parse, run_setup, short
from benchmarks.traffic.mesh_report import BASELINE, BEGIN, END, QUICK, ROWS, SetupResult, render
from testbed.tools import REPO

HEADER = {"command": "python -m benchmarks run mesh-traffic", "started": "2026-11-26 04:00 UTC",
          "load_start": "1.00 1.00 1.00", "load_end": "2.00 1.50 1.00", "commit": "abc",
          "counts": QUICK, "note": "",
          "machine": {"CPU": "cpu", "cores (os.cpu_count)": "2", "memory": "1 GiB",
                      "kernel": "6", "OS": "Debian"}}


def namespaces_of(pid: int) -> list[str]:
    """The cluster's namespaces (testbed.netns.unique names) made by process `pid`."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                           check=True).stdout.split()
    return [n for n in names if re.fullmatch(rf"(cfab|cnode|cp){pid % 10000}[0-9a-f]{{6}}", n)]


def test_the_quick_kernel_run_measures_every_row_and_writes_its_section(tmp_path: Path) -> None:
    out, data = tmp_path / "BENCHMARKS.md", tmp_path / "mesh.json"
    out.write_text("# Benchmarks\n\nother figures\n")
    argv = [sys.executable, "-m", "benchmarks.traffic.mesh", "--quick", "--setup", "kernel",
            "--out", str(out), "--json", str(data)]
    for _ in range(2):
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stderr[-4000:]
        assert namespaces_of(proc.pid) == []
    (setup,) = json.loads(data.read_text())["setups"]
    assert setup["name"] == "kernel" and setup["status"] == "ok" and setup["errors"] == {}
    assert {r.key: len(setup["values"][r.key]) for r in ROWS} == {r.key: 1 for r in ROWS}
    assert set(setup["retransmits"]) == {r.key for r in ROWS if r.kind == "tcp"}
    assert setup["pod_tso"] == {"tx-tcp-segmentation": True, "tx-tcp6-segmentation": True}
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nother figures\n")
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    section = text[text.index(BEGIN):text.index(END)]
    assert "## Pod traffic with the node mesh on" in section and "--setup kernel" in section
    assert STAMP.sub("", section) in stdout  # printed as written, but for the stamp


def test_a_setup_whose_agents_refuse_to_start_is_a_failed_setup() -> None:
    result = run_setup("bogus", {"Dataplane": "kernel", "NoSuchKey": 1}, QUICK)
    assert result.status == "failed" and result.values == {}
    assert "agent node-1 exited" in result.note and "'NoSuchKey'" in result.note, result.note
    assert "known keys" not in result.note  # the agent's list of every key is left out
    assert namespaces_of(os.getpid()) == []


def _result(name: str, scale: float) -> SetupResult:
    r = SetupResult(name, {"Dataplane": "vpp" if "vpp" in name else "kernel"})
    r.values = {row.key: [scale * (i + 1)] for i, row in enumerate(ROWS)}
    return r


def test_the_report_compares_every_setup_with_the_kernel_row_by_row() -> None:
    kernel, vpp = _result("kernel", 1.0), _result("vpp-vxlan-in-vpp", 0.5)
    vpp.errors = {"udp-across": "iperf3: unable to connect"}
    failed = SetupResult("vpp-vxlan-in-linux", {"VxlanOwner": "linux"}, status="failed",
                         note="agent node-1 exited: unknown key")
    skipped = SetupResult("other", {}, status="skipped", note="no VPP")
    text = render(HEADER, [kernel, vpp, failed, skipped])
    rows = [line for line in text.splitlines() if ", mesh on |" in line]
    assert [r.split(" | ")[0] for r in rows] == [f"| {row.label}, mesh on" for row in ROWS]
    assert rows[0].split(" | ")[1:] == ["1.00", "0.50", "0.50 x", "failed", "-", "skipped",
                                         "- |"]
    udp_same = next(r for r in rows if r.startswith("| UDP loss % at 1 Gbit/s offered, same"))
    assert "-4.50 points" in udp_same  # 4.5 - 9.0 (the ninth row)
    assert "**failed**: agent node-1 exited: unknown key" in text and "skipped: no VPP" in text
    assert "UDP loss % at 1 Gbit/s offered, across nodes, IPv4: **failed**: iperf3" in text
    assert text.startswith(BEGIN) and text.rstrip().endswith(END)


def test_short_keeps_the_agents_reason_and_the_setups_table_is_sound() -> None:
    exc = RuntimeError("agent node-1 exited:\nTraceback (most recent call last):\n  x\n"
                       "2026 ERROR vswitch-agent: refusing to start: config key 'VxlanOwner' = "
                       "'linux': unknown key (known keys: A, B)\n")
    assert short(exc) == ("agent node-1 exited: 2026 ERROR vswitch-agent: refusing to start: "
                          "config key 'VxlanOwner' = 'linux': unknown key")
    names = [name for name, _ in SETUPS]
    assert names[0] == BASELINE and len(set(names)) == len(names)
    assert all(config["Dataplane"] == ("vpp" if "vpp" in name else "kernel")
               for name, config in SETUPS)
    owners = {name: config.get("VXLANOwner") for name, config in SETUPS}
    assert owners == {"kernel": None, "vpp-vxlan-in-vpp": "vpp", "vpp-vxlan-in-linux": "linux",
                      "vpp-polling": "linux", "vpp-rings-20-10": "linux",
                      "vpp-rings-14-16": "linux", "vpp-rings-256": "linux"}
    assert dict(SETUPS)["vpp-polling"]["InterfaceRxMode"] == "polling"
    # the ring setups spell every frame count out: the agent's defaults may change under them
    for name in ("vpp-rings-20-10", "vpp-rings-14-16"):
        assert {"AfPacketRxFrames", "AfPacketTxFrames", "AfPacketHostRxFrames",
                "AfPacketHostTxFrames"} <= set(dict(SETUPS)[name])
    # the default run is the three mesh setups; polling only when asked for
    assert parse(["--quick", "--out", "/tmp/x.md"]).setup == [
        "kernel", "vpp-vxlan-in-vpp", "vpp-vxlan-in-linux"]
    assert parse(["--quick", "--out", "/tmp/x.md", "--setup", "vpp-polling",
                  "--setup", "kernel"]).setup == ["kernel", "vpp-polling"]

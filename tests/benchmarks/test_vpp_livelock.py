"""benchmarks/traffic/vpp_livelock.py: its report, and one trial against a real VPP (marker `vpp`).

Test plan:
- the section holds its markers, the VPP's version and the command, and a row per trial, a VPP
  that did not answer in bold;
- against a real VPP of its own (VSWITCH_TEST_VPP_START / _STOP / _MESH_SOCKET): three AF_PACKET
  interfaces, each given a frame while VPP is stopped, are far below epoll's 16 files, so VPP
  answers afterwards in either receive mode; its namespace and its VPP are gone after the trial.
"""

from __future__ import annotations

import subprocess

import pytest

from benchmarks.traffic import vpp_livelock
from testbed import vpp_nodes


def test_the_section_has_a_row_per_trial_and_marks_a_silent_vpp() -> None:
    results = [{"count": 15, "mode": "interrupt", "answers": True, "version": "26.06-release"},
               {"count": 40, "mode": "interrupt", "answers": False, "version": "26.06-release"}]
    text = vpp_livelock.section(results, "python -m benchmarks run vpp-livelock", ("1", "2"))
    assert text.startswith(vpp_livelock.BEGIN) and text.rstrip().endswith(vpp_livelock.END)
    assert "VPP: 26.06-release" in text and "`python -m benchmarks run vpp-livelock`" in text
    assert "| 15 | interrupt | yes |" in text and "| 40 | interrupt | **no** |" in text


@pytest.mark.vpp
@pytest.mark.skipif(not vpp_nodes.REAL_VPP, reason=vpp_nodes.MISSING)
@pytest.mark.parametrize("mode", ["interrupt", "polling"])
def test_a_few_interfaces_holding_frames_leave_vpp_answering(mode: str) -> None:
    result = vpp_livelock.trial(3, mode)
    assert result["answers"] is True and result["count"] == 3 and result["version"]
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    vpps = subprocess.run(["pgrep", "-f", "vpp-nodes/vll"], capture_output=True, text=True)
    assert "vll" not in netns and vpps.stdout == ""

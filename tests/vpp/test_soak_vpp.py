"""A short soak (benchmarks/soak) against a real VPP: skipped unless VSWITCH_TEST_VPP_SOCKET
names its API socket; VPP's log is judged when VSWITCH_TEST_VPP_LOG names it (testbed/vpplog).

Plan: the real agent (`Dataplane: vpp`, its own VRFs, interconnect and subnets: testbed/vpp)
keeps 10 live pods while 400 are added and deleted through the real plugin, every cycle
checked (TCP to an older pod, the Service stand-in over TCP and UDP). Asserted: every check
passed, VPP answered every control ping (one a second) and every sample, nothing of a deleted
pod is left (VPP interfaces, routes, neighbors, host links and routes, etcd records and
allocations) with the live pods up nor after the last DEL, and VPP's log has no line a client
caused for the soak's interfaces. No timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.vpplog import LOG_ENV

REPO = Path(__file__).resolve().parents[2]
SOCKET = os.environ.get("VSWITCH_TEST_VPP_SOCKET", "")
pytestmark = [
    pytest.mark.vpp,
    pytest.mark.skipif(not SOCKET, reason="VSWITCH_TEST_VPP_SOCKET is not set (no real VPP)"),
]


def test_a_short_soak_on_a_real_vpp_leaks_nothing(tmp_path: Path) -> None:
    data = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.soak.run", "--dataplane", "vpp", "--pods", "10",
         "--cycles", "400", "--window", "50", "--out", str(tmp_path / "soak.md"),
         "--json", str(data)],
        cwd=REPO, capture_output=True, text=True, timeout=1200, check=False,
    )
    assert data.exists(), proc.stderr[-4000:]
    (run,) = json.loads(data.read_text())["runs"]
    assert run["failures"] == 0, run["details"]
    assert run["cycles"] == 400
    assert all(w["values"]["vpp_answers"] == 1.0 for w in run["windows"])
    assert run["vpp_pings"] > 0 and run["vpp_unanswered"] == 0  # a ping a second throughout
    for counts in (run["leaks_live"], run["leaks_empty"]):
        for key in ("vpp_interfaces_dead_pods", "vpp_routes_dead_pods",
                    "vpp_neighbors_dead_pods", "links_dead_pods", "routes_dead_pods"):
            assert counts[key] == 0, (key, counts)
    for key in ("vpp_interfaces_live_pods", "links_live_pods", "etcd_pods", "etcd_ipam",
                "records", "allocations"):
        assert run["leaks_live"][key] == 10, key
        assert run["leaks_empty"][key] == 0, key
    if os.environ.get(LOG_ENV):
        log = run["vpp_log"]
        assert log["device_gone_first"] == [] and log["unbound_delete"] == [], log
    assert proc.returncode == 0, proc.stderr[-4000:]

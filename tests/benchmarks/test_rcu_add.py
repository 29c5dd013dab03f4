"""benchmarks.cni.rcu_add's report: each VPP row is compared with the kernel dataplane's of the same
round and knob, its medians are over rounds, and the agents' configs follow the knob as an
operator's would.
"""

from __future__ import annotations

from benchmarks.cni import rcu_add
from benchmarks.cni.rcu_add import Row, agent_extra
from benchmarks.cni.verbs import Throughput

P0 = "vpp, VppPodPool 4"


def test_vpp_rows_are_compared_with_the_kernel_of_their_round_and_knob() -> None:
    rows = [Row(r, k, s, add, add + 5, 20.0, None, None, "1.0")
            for r, k, s, add in ((1, 0, "kernel", 30.0), (1, 0, P0, 60.0),
                                 (1, 1, "kernel", 40.0), (1, 1, P0, 44.0),
                                 (2, 0, "kernel", 20.0), (2, 0, P0, 50.0),
                                 (2, 1, "kernel", 30.0), (2, 1, P0, 39.0))]
    assert [round(rcu_add.ratio(rows, r) or 0, 2) for r in rows if r.setup == P0] == \
        [2.0, 1.1, 2.5, 1.3]
    for row, churn in zip(rows[2:4], (20.0, 26.0), strict=True):  # round 1, knob 1 only
        row.churn_ms = churn
    assert rcu_add.ratio(rows, rows[3], "churn_ms") == 1.3
    assert rcu_add.ratio(rows, rows[7], "churn_ms") is None  # no churn measured there
    for row, add_rate in zip((rows[3], rows[7]), (30.0, 40.0), strict=True):
        row.burst = Throughput(48, add_rate, 50.0, [10.0, 30.0, 20.0], [5.0, 7.0, 6.0], {}, {})
    text = rcu_add.section(rows, "python -m benchmarks run rcu-add", ("1", "2"), 100)
    assert text.startswith(rcu_add.BEGIN) and text.rstrip().endswith(rcu_add.END)
    # 4 spares are VppPodPool's default under either knob; the churn's cells: its ADD and
    # that over the kernel's; the burst's: pods/s and the median latency
    assert (f"| 1 | 1 | {P0} (the default) | 44.0 (49.0) | 20.0 | 1.10 x | 26.0 | 1.30 x |  |  | "
            "30.0 (20) | 50.0 (6) | 1.0 |") in text
    assert (f"| 1 | 0 | {P0} (the default) | 60.0 (65.0) | 20.0 | 2.00 x |  |  |  |  |  |  "
            "| 1.0 |") in text
    # medians over the two rounds: ADD (44+39)/2, ratio (1.1+1.3)/2, burst (30+40)/2; the
    # churn, measured in one round only, is that round's
    assert f"| 1 | {P0} (the default) | 41.5 | 20.0 | 1.20 x | 26.0 | 1.30 x | 35.0 | 50.0 |" \
        in text
    assert f"| 0 | {P0} (the default) | 55.0 | 20.0 | 2.25 x |  |  |  |  |" in text


def test_the_agents_follow_the_knob_as_an_operator_configures_them() -> None:
    assert agent_extra("kernel", 1, "/s") == {}
    for knob in (0, 1):
        for pool in (0, 4):
            extra = agent_extra(f"vpp, VppPodPool {pool}", knob, "/s")
            assert (extra["ExpediteKernelRcu"], extra["VppPodPool"]) == (bool(knob), pool)
            assert (extra["Dataplane"], extra["VPPAPISocket"]) == ("vpp", "/s")

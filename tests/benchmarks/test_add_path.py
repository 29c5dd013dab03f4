"""The ADD-path benchmark (issue #22's module count), run for real, small, so that it cannot rot
(no time is asserted).

Test plan: `benchmarks.cni.add_path.measure` (as root: a node namespace, a real etcd, the kernel
driver) traces one ADD: the modules it names include the request's way through the wings (the
gRPC service, the pod manager, the kernel driver, the pod's netlink) and nothing of the tracer
or the test, and no more of the project's than 18 (a ratchet: 19 ran before the agent moved
into wings, at d9f47b2; a new module on the ADD path has to earn its place by taking another
off); the pod's netns is opened exactly once; the section lists every project module
once under its wing and keeps its markers.
"""

from __future__ import annotations

import os

import pytest

from benchmarks.cni import add_path

ADD_PATH_MODULES = 18  # d9f47b2, before the wings: 19

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, links)")


def test_one_traced_add_names_its_modules_and_one_netns_open() -> None:
    figures = add_path.measure(runs=2)
    ours = figures["ours"]
    for module in ("agent.api.grpc_server", "agent.lifecycle.pods", "agent.dataplane.kernel",
                   "agent.linux.pod_netns", "ipam.allocator"):
        assert module in ours
    assert not [m for m in ours + figures["others"] if m.startswith(("benchmarks", "tests"))]
    assert len(ours) <= ADD_PATH_MODULES, ours
    assert figures["opened"] == 1 and figures["entered"] >= 1
    assert figures["runs"] == 2 and 0 < figures["min_ms"] <= figures["median_ms"]
    text = add_path.section(figures, "python -m benchmarks run add-path", ("1.0", "1.1"))
    assert text.startswith(add_path.BEGIN) and text.rstrip().endswith(add_path.END)
    rows = [line for line in text.splitlines() if line.startswith("| agent") or
            line.startswith("| ipam")]
    assert sum(int(row.split("|")[2]) for row in rows) == len(ours)
    assert f"**{len(ours)} of the project's**" in text


def test_wings_group_the_agent_by_its_packages() -> None:
    assert add_path.wings(["agent.dataplane", "agent.dataplane.kernel", "agent.linux.netns",
                           "ipam.allocator"]) == {
        "agent.dataplane": ["agent.dataplane", "agent.dataplane.kernel"],
        "agent.linux": ["agent.linux.netns"], "ipam": ["ipam.allocator"]}

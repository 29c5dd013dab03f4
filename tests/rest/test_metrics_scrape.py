"""GET /metrics of a real agent after real ADD/DEL traffic, parsed with prometheus-client's own
text parser, checked against docs/metrics.md.

Test plan:
- three ADDs (one refused: a netns path that does not exist) and two DELs through the real
  plugin: the request counters per verb and code, the latency histograms' counts, one ADD phase
  observation per step of each successful ADD, the pod gauge and the pool gauges follow the
  traffic; etcd and the kernel dataplane are up; the library's process series are there.
- every series docs/metrics.md lists is in the scrape with exactly the labels it documents, and
  every vswitch_cni_* family of the scrape is documented.
- the benchmarks' own reader (benchmarks/core/agent_metrics.py) still finds the histograms.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from benchmarks.core import agent_metrics
from testbed.agent import AgentHandle, net_config, run_plugin, running_agent

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
PHASES = ("allocate", "record", "wire", "podside", "commit")


def documented() -> dict[str, tuple[str, set[str]]]:
    """series name -> (type, labels) from the table in docs/metrics.md."""
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \|([^|]*)\|", DOC.read_text(), re.MULTILINE)
    return {name: (kind, set(re.findall(r"`(\w+)`", labels))) for name, kind, labels in rows}


API_SERIES = ("vswitch_cni_vpp_", "vswitch_cni_policy_", "vswitch_cni_kube_",
              "vswitch_cni_wireguard_")


def assert_documented(families: set[str], docs: dict[str, tuple[str, set[str]]]) -> None:
    """Every vswitch_cni_* family scraped is in the table."""
    undocumented = {f for f in families if f.startswith("vswitch_cni_")} - {
        n.removesuffix("_total") for n in docs} - set(docs)
    assert undocumented == set()


def check_series(samples: dict[str, list[Sample]], types: dict[str, str],
                 docs: dict[str, tuple[str, set[str]]], wanted: Callable[[str], bool]) -> None:
    """The documented series `wanted` picks are scraped, of their type, with their labels."""
    for name, (kind, labels) in docs.items():
        if not wanted(name):
            continue
        family = name.removesuffix("_total") if kind == "counter" else name
        assert types.get(family) == kind, (name, types.get(family))
        series = samples.get(name) or samples.get(f"{name}_count") or []
        assert series, f"{name} documented but not scraped"
        assert all(set(s.labels) == labels for s in series), (name, labels)


def scrape(agent: AgentHandle) -> tuple[str, dict[str, list[Sample]], dict[str, str]]:
    status, text = agent.get("/metrics")
    assert status == 200
    samples: dict[str, list[Sample]] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(str(text)):
        types[family.name] = family.type
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return str(text), samples, types


def value(samples: dict[str, list[Sample]], name: str, **labels: str) -> float:
    found = [s.value for s in samples.get(name, [])
             if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return float(found[0])


def test_metrics_after_add_and_del(tmp_path: Path, etcd_endpoints: list[str],
                                   make_netns: Callable[[], str]) -> None:
    with running_agent(tmp_path, etcd_endpoints, pod_subnet="10.79.0.0/16") as agent:
        netnses = [make_netns(), make_netns()]
        for i, ns in enumerate(netnses):
            out = run_plugin("ADD", net_config(agent), container_id=f"m{i}", netns=ns)
            assert out.returncode == 0, out.stdout
        bad = run_plugin("ADD", net_config(agent), container_id="m9",
                         netns=str(tmp_path / "no-such-netns"))
        assert bad.returncode != 0
        bad_code = str(bad.json["code"])

        _, samples, types = scrape(agent)
        assert value(samples, "vswitch_cni_pods") == 2
        assert value(samples, "vswitch_cni_pool_in_use", family="4") == 2
        capacity = value(samples, "vswitch_cni_pool_capacity", family="4")
        assert value(samples, "vswitch_cni_pool_free", family="4") == capacity - 2

        for i, ns in enumerate(netnses):
            out = run_plugin("DEL", net_config(agent), container_id=f"m{i}", netns=ns)
            assert out.returncode == 0, out.stdout
        text, samples, types = scrape(agent)

    total = "vswitch_cni_requests_total"
    assert value(samples, total, verb="ADD", code="0") == 2
    assert value(samples, total, verb="ADD", code=bad_code) == 1
    assert value(samples, total, verb="DEL", code="0") == 2
    assert value(samples, "vswitch_cni_request_seconds_count", verb="ADD") == 3
    assert value(samples, "vswitch_cni_request_seconds_count", verb="DEL") == 2
    assert value(samples, "vswitch_cni_request_seconds_bucket", verb="DEL", le="+Inf") == 2
    for phase in PHASES:
        assert value(samples, "vswitch_cni_add_phase_seconds_count", phase=phase) == 2
    assert value(samples, "vswitch_cni_pods") == 0
    assert value(samples, "vswitch_cni_pool_in_use", family="4") == 0
    assert value(samples, "vswitch_cni_etcd_up") == 1
    assert value(samples, "vswitch_cni_dataplane_up", dataplane="kernel") == 1
    assert value(samples, "vswitch_cni_reconcile_pods", result="live") == 0
    assert value(samples, "process_resident_memory_bytes") > 0
    assert value(samples, "process_open_fds") > 0

    docs = documented()
    assert len(docs) >= 19
    families = {re.sub(r"_(total|bucket|sum|count|created)$", "", n) for n in samples}
    # not the series of a VPP agent (tests/vpp checks them), nor those of an agent with a
    # Kubernetes API (tests/kube/test_policy_agent) or with encryption (tests/cluster/
    # test_encryption)
    check_series(samples, types, docs, lambda name: not name.startswith(API_SERIES))
    assert_documented(families, docs)

    seen = agent_metrics.parse(text)
    assert seen[(agent_metrics.REQUESTS, "ADD")].count == 3
    assert seen[(agent_metrics.PHASES, "wire")].count == 2

"""benchmarks/core/plots.py (the benchmarks' SVG pictures) and every section's picture, drawn from
made-up results, so that a picture whose benchmark cannot run here (VPP, an API server) is still
drawn in CI. The quick runs (test_quick, test_soak_quick, test_traffic_quick, test_vpp_core,
test_policy_enforce_quick) check the pictures of real runs. No number in a picture is asserted.

Test plan:
- `cdf`, `bars` and `lines` each write an SVG that parses as XML with an <svg> root, whose text
  holds the figure's title, every panel's title and every series' label; a series without values
  (or a bar whose value is missing or not finite) is left out, and a panel left empty says
  "not measured". Drawing the same numbers twice writes the same bytes.
- `svg_series` refuses a file that is not XML or whose root is not <svg>.
- `plot_dir` is docs/benchmarks/ beside the markdown file, and `embed`'s link, read from that
  file's folder, names the picture written there.
- Each benchmark's `plot` (cni, traffic, vpp-core, soak, policy-enforce) draws its series from
  its results: the CNI verbs with ours (kernel and VPP) beside the reference; the traffic setups;
  vpp-core's setups in both panels, Gbit/s per busy CPU computed from the busy shares (and
  `busy_shares` from two /proc/stat readings); the soak's dataplanes over the cycles; the policy
  changes per dataplane. Each section's text embeds its picture between its markers.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from benchmarks.cni import report as cni_report
from benchmarks.cni.results import Results
from benchmarks.core import plots
from benchmarks.policy import enforce_report
from benchmarks.soak import report as soak_report
from benchmarks.soak.report import DataplaneRun, Window
from benchmarks.traffic import one_node, vpp_core
from benchmarks.traffic.mesh_report import QUICK, SetupResult
from tests.benchmarks.test_mesh_traffic import HEADER

LINK = re.compile(r"!\[[^\]]+\]\(([^)]+\.svg)\)")


def test_cdf_writes_every_panel_and_series_and_leaves_out_empty_ones(tmp_path: Path) -> None:
    path = plots.cdf(tmp_path / "a" / "c.svg", "latency", {
        "ADD": {"ours": [3.0, 1.0, 2.0], "reference": [1.5], "nobody": []},
        "DEL": {}}, "ms")
    assert path == tmp_path / "a" / "c.svg"
    texts = plots.svg_series(path)
    assert {"latency", "ADD", "DEL", "ms", "ours", "reference", "not measured"} <= texts
    assert "nobody" not in texts


def test_bars_group_series_per_category_and_skip_missing_values(tmp_path: Path) -> None:
    texts = plots.svg_series(plots.bars(tmp_path / "b.svg", "traffic", [
        plots.Bars("TCP", "Gbit/s", {"IPv4": {"kernel": 3.0, "vpp": 2.0},
                                     "IPv6": {"kernel": 2.5}}),
        plots.Bars("per CPU", "Gbit/s per busy CPU", {"run": {"nan": math.nan}})]))
    assert {"traffic", "TCP", "per CPU", "Gbit/s", "IPv4", "IPv6", "kernel", "vpp",
            "not measured"} <= texts
    assert "nan" not in texts


def test_lines_draw_a_trend_per_series(tmp_path: Path) -> None:
    texts = plots.svg_series(plots.lines(tmp_path / "l.svg", "soak", [
        plots.Lines("RSS", "MiB", {"kernel": ([0, 5, 10], [50.0, 51.0, 51.5]),
                                   "vpp": ([], [])}),
        plots.Lines("fds", "fds", {"vpp": ([5], [20.0])})], "cycles"))
    assert {"soak", "RSS", "fds", "MiB", "cycles", "kernel", "vpp"} <= texts


def test_the_same_numbers_give_the_same_file(tmp_path: Path) -> None:
    def draw(name: str) -> bytes:
        plots.cdf(tmp_path / f"{name}.svg", "t", {"p": {"s": [1.0, 2.0]}}, "ms")
        plots.bars(tmp_path / f"{name}-b.svg", "t", [plots.Bars("p", "u", {"g": {"s": 1.0}})])
        return (tmp_path / f"{name}.svg").read_bytes() + (tmp_path / f"{name}-b.svg").read_bytes()

    assert draw("one") == draw("two")


def test_svg_series_refuses_what_is_not_an_svg(tmp_path: Path) -> None:
    (tmp_path / "x.svg").write_text("<svg><text>cut")
    (tmp_path / "y.svg").write_text("<html><text>a</text></html>")
    with pytest.raises(ValueError, match="not XML"):
        plots.svg_series(tmp_path / "x.svg")
    with pytest.raises(ValueError, match="not <svg>"):
        plots.svg_series(tmp_path / "y.svg")


def test_the_embedded_link_names_the_picture_beside_the_markdown(tmp_path: Path) -> None:
    out = tmp_path / "x" / "q.md"
    assert plots.plot_dir(out) == tmp_path / "x" / "docs" / "benchmarks"
    line = plots.embed("cni-latency", "ADD latency")
    assert line == "![ADD latency](docs/benchmarks/cni-latency.svg)"
    assert out.parent / linked(line) == plots.plot_dir(out) / "cni-latency.svg"


def linked(text: str) -> str:
    (link,) = LINK.findall(text)
    return str(link)


# --- every section's picture, from made-up results -----------------------------------------

def test_the_cni_picture_puts_ours_beside_the_reference_per_verb(tmp_path: Path) -> None:
    r = Results("quick", "python -m benchmarks run cni --quick", "now", "1 1 1", {}, {},
                latency_runs=3)
    r.samples = {label: {verb: [1.0 + i, 2.0, 3.0] for verb in ("ADD", "CHECK", "DEL")}
                 for i, label in enumerate((cni_report.OURS, cni_report.REFERENCE,
                                            cni_report.OURS_VPP))}
    path = cni_report.plot(r, tmp_path)
    assert path.name == "cni-latency.svg"
    assert {"ADD", "CHECK", "DEL", "vswitch-cni", "vswitch-cni (vpp)",
            "bridge+host-local"} <= plots.svg_series(path)
    assert linked(cni_report.render(r)) == "docs/benchmarks/cni-latency.svg"


def test_the_traffic_picture_has_every_measured_setup(tmp_path: Path) -> None:
    figs = [one_node.Figures("bare veth pair (floor)", tcp_gbps=[9.0], rtt_ms=[0.05],
                             udp_loss_pct=[0.0]),
            one_node.Figures("kernel dataplane", tcp_gbps=[7.0], rtt_ms=[0.06],
                             udp_loss_pct=[0.1]),
            one_node.Figures("VPP dataplane", note="not measured: no VPP")]
    texts = plots.svg_series(one_node.plot(figs, one_node.QUICK, tmp_path))
    assert {"TCP, one stream", "RTT", "bare veth pair", "kernel dataplane"} <= texts
    assert "VPP dataplane" not in texts  # not measured: no bar, said in the title
    assert any("not measured: no VPP" in t for t in texts)


def test_the_vpp_core_picture_has_gbits_and_gbits_per_busy_cpu(tmp_path: Path) -> None:
    def result(name: str, gbps: float, per_cpu: float) -> SetupResult:
        r = SetupResult(name, {"placement": "pods on CPU 0", vpp_core.PER_CPU: per_cpu})
        r.values = {"tcp-same-v4": [gbps], "tcp-same-v6": [gbps / 2], "rtt-same": [0.1]}
        return r

    results = [result("kernel", 4.0, 2.0), result("vpp-own-core", 3.0, 1.5),
               SetupResult("vpp-shared", {}, status="skipped", note="no VPP")]
    texts = plots.svg_series(vpp_core.plot(results, tmp_path))
    assert {"TCP on one node, one stream (median)", "TCP across nodes, one stream (median)",
            "Gbit/s per busy CPU", "IPv4", "IPv6", "kernel", "vpp-own-core"} <= texts
    assert "vpp-shared" not in texts
    text = vpp_core.render({**HEADER, "counts": QUICK}, results)
    assert linked(text) == "docs/benchmarks/vpp-core.svg"
    assert text.index("vpp-core.svg") < text.index(vpp_core.END)
    # cpu0 busy 100 %, cpu1 50 %: 1.5 CPUs' worth of work
    shares = vpp_core.busy_shares({"cpu0": (100, 50), "cpu1": (100, 90)},
                                  {"cpu0": (200, 50), "cpu1": (300, 190)})
    assert shares == {"cpu0": 1.0, "cpu1": 0.5}


def test_the_soak_picture_follows_each_dataplane_over_the_cycles(tmp_path: Path) -> None:
    def run(name: str) -> DataplaneRun:
        windows = [Window(cycle, 1.0, "1.0", [5.0, 6.0] if cycle else [], [3.0] if cycle else [],
                          0, {"agent_rss_kib": 51200.0 + cycle, "agent_fds": 20.0})
                   for cycle in (0, 5, 10)]
        return DataplaneRun(name, pods=4, window=5, windows=windows)

    texts = plots.svg_series(soak_report.plot([run("kernel"), run("vpp")], tmp_path))
    assert {"agent RSS", "agent open fds", "ADD latency, window median",
            "DEL latency, window median", "cycles done", "kernel", "vpp"} <= texts
    header = {"command": "c", "started": "s", "load_start": "1", "load_end": "2",
              "machine": {}, "commit": "abc", "seed": "1", "vpp_log": "none"}
    text = soak_report.render(header, [])
    assert linked(text) == "docs/benchmarks/soak.svg"
    assert text.index(soak_report.BEGIN) < text.index("soak.svg") < text.index(soak_report.END)


def enforce_figures() -> dict[str, Any]:
    hist = {"count": 2, "mean_ms": 5.0, "p50_le_ms": 5.0, "p99_le_ms": 10.0}
    add = {"3": {"wall": {"median": 40.0, "p99": 50.0}, "handler": hist, "policy": hist}}
    traffic = {"tcp_gbps": 5.0, "retransmits": 0, "rtt_ms": 0.05}
    plane = {"enforce": {"deny": [40.0, 60.0], "allow": [30.0], "missed": 0,
                         "conntrack": [3, 4]},
             "add_on": add, "add_off": add, "rules": 41, "traffic_off": traffic,
             "traffic_on": traffic, "traffic_rules": traffic}
    return {"started": "now", "load_start": "1", "load_end": "2",
            "args": {"note": "", "live": [3], "changes": 2, "probe_gap": 0, "measured": 2,
                     "seconds": 1, "pings": 5},
            "api": {"pods": 20, "namespaces": 2, "policies": 3},
            "kernel": plane, "vpp": plane, "vpp_note": ""}


def test_the_policy_picture_has_both_changes_per_dataplane(tmp_path: Path) -> None:
    f = enforce_figures()
    texts = plots.svg_series(enforce_report.plot(f, tmp_path))
    assert {"created → denied", "deleted → allowed", "kernel", "vpp"} <= texts
    assert "vpp-l2" not in texts
    text = enforce_report.section(f, "python -m benchmarks run policy-enforce")
    assert linked(text) == "docs/benchmarks/policy-enforce.svg"
    assert text.index("policy-enforce.svg") < text.index(enforce_report.END)

"""benchmarks.policy.scale's section of BENCHMARKS.md, from its figures (pure)."""

from __future__ import annotations

from typing import Any

from benchmarks.core.sections import markers
from benchmarks.core.stats import Summary

BEGIN, END = markers("policy-scale")


def _ms(values: list[float]) -> str:
    if not values:
        return "n=0"
    s = Summary.of(values, "ms")
    return f"{s.median:.1f} / {s.p99:.1f} (n={s.n})"


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def section(f: dict[str, Any], command: str) -> str:
    api, quiet, peers, enforce = f["api"], f["quiet"], f["peers"], f["enforce"]
    add = next(iter(f["add_on"].values()))
    rss = max(f["rss_ready_mib"], f["rss_local_mib"], f["rss_end_mib"], quiet["rss_mib"],
              peers["rss_mib"])
    worst_cpu = max(quiet["cpu_share"], peers["cpu_share"])
    p99 = max([*enforce["deny"], *enforce["allow"]], default=float("nan"))
    lines = [
        BEGIN, "## NetworkPolicy at cluster scale (issue #39)", "",
        f"Command: `{command}` (as root, VSWITCH_TEST_KUBE_APISERVER naming kube-apiserver "
        f"v1.28). Started {f['started']}; load {f['load_start']} at the start, "
        f"{f['load_end']} at the end; "
        + ", ".join(f"{k} {v}" for k, v in f["machine"].items()) + ".", "",
        f"A real kube-apiserver holding {api['nodes']} Nodes, {api['pods']} Pods in "
        f"{api['namespaces']} namespaces (with podIPs, no kubelets), {api['policies']} "
        f"NetworkPolicies and {api['services']} Services with EndpointSlices, made through "
        f"the API in {api['seconds']:.0f} s; one real agent (kernel dataplane, the shipped "
        "role's user, its API connections through a counting proxy) with "
        f"{f['args']['local']} real pods. How it measures: the module's docstring.", "",
        "| agent | figure |", "| --- | --- |",
        f"| start to ready | {f['ready_s']:.1f} s |",
        f"| start to its first NetworkPolicy apply | {f['first_apply_s']:.1f} s |",
        f"| read from the API until then | {f['read_bytes_ready'] / 2**20:.1f} MiB |",
        f"| RSS: ready / with its pods / at the end | {f['rss_ready_mib']:.0f} / "
        f"{f['rss_local_mib']:.0f} / {f['rss_end_mib']:.0f} MiB |", "",
        "| pod events elsewhere | events/s | agent CPU (share of a core) | API read, KiB/s "
        "| RSS MiB |", "| --- | --- | --- | --- | --- |",
        *(f"| {name} | {p['events_per_s']:.0f} | {p['cpu_share']:.2f} | "
          f"{p['read_bytes_per_s'] / 1024:.0f} | {p['rss_mib']:.0f} |"
          for name, p in (("touch none of its sets (`version` flipped)", quiet),
                          ("move pods in and out of a set it names (team1 `tier`)", peers))),
        "",
        "Change to enforcement during the second phase, ms, median / p99 (as "
        "benchmarks.policy.enforce): created→denied " + _ms(enforce["deny"])
        + "; deleted→allowed " + _ms(enforce["allow"]) + f"; missed {enforce['missed']}.", "",
        f"ADD with {next(iter(f['add_on']))} live pods, NetworkPolicy on: handler "
        f"{add['handler']['mean_ms']:.1f} ms mean, `policy` phase "
        f"{add['policy']['mean_ms']:.1f} ms (NetworkPolicy off: the policy-enforce section).",
        "",
        "| target (issue #39) | measured | |", "| --- | --- | --- |",
        f"| RSS ≤ 500 MiB | {rss:.0f} MiB | {_met(rss <= 500)} |",
        f"| ready ≤ 60 s | {f['first_apply_s']:.1f} s | {_met(f['first_apply_s'] <= 60)} |",
        f"| ≤ 10 % of a core at {f['args']['rate']:.0f} events/s | {worst_cpu:.0%} | "
        f"{_met(worst_cpu <= 0.10)} |",
        f"| enforcement p99 ≤ 200 ms | {p99:.0f} ms | {_met(p99 <= 200)} |",
        END, ""]
    return "\n".join(lines)

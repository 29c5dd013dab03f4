"""Reads the agent's Prometheus /metrics: the per-verb request and per-phase ADD histograms.

Two snapshots are subtracted so that a figure reports only the requests it made itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from testbed.agent import AgentHandle

_LINE = re.compile(r'^(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$')
_LABEL = re.compile(r'(\w+)="([^"]*)"')


@dataclass
class Histogram:
    """Cumulative bucket counts (upper bound -> count), sum and count of one series."""

    buckets: dict[float, float] = field(default_factory=dict)
    sum: float = 0.0
    count: float = 0.0

    def minus(self, earlier: Histogram | None) -> Histogram:
        if earlier is None:
            return Histogram(dict(self.buckets), self.sum, self.count)
        return Histogram({b: c - earlier.buckets.get(b, 0.0) for b, c in self.buckets.items()},
                         self.sum - earlier.sum, self.count - earlier.count)

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count else 0.0

    def quantile_bound(self, q: float) -> float:
        """The upper bound of the bucket holding quantile q (what the histogram can tell)."""
        target = q * self.count
        for bound in sorted(self.buckets):
            if self.buckets[bound] >= target:
                return bound
        return float("inf")


Series = dict[tuple[str, str], Histogram]  # (metric, label value) -> histogram


def parse(text: str) -> Series:
    out: Series = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        name, value = match["name"], float(match["value"])
        labels = dict(_LABEL.findall(match["labels"]))
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix):
                base = name[: -len(suffix)]
                key = labels.get("phase") or labels.get("verb") or labels.get("message") or ""
                hist = out.setdefault((base, key), Histogram())
                if suffix == "_bucket":
                    bound = labels["le"]
                    hist.buckets[float("inf") if bound == "+Inf" else float(bound)] = value
                elif suffix == "_sum":
                    hist.sum = value
                else:
                    hist.count = value
    return out


def snapshot(agent: AgentHandle) -> Series:
    status, body = agent.get("/metrics")
    if status != 200:
        raise RuntimeError(f"GET /metrics answered {status}: {body}")
    return parse(str(body))


def delta(before: Series, after: Series, metric: str) -> dict[str, Histogram]:
    """label value -> histogram of what happened between the snapshots, for one metric."""
    return {key: hist.minus(before.get((name, key)))
            for (name, key), hist in after.items() if name == metric}


PHASES = "vswitch_cni_add_phase_seconds"
REQUESTS = "vswitch_cni_request_seconds"
VPP_CALLS = "vswitch_cni_vpp_call_seconds"

"""Prometheus metrics of the agent: request counts and latencies, ADD phase split, pod gauge.

Small on purpose: counters and fixed-bucket histograms kept under one lock, rendered in the
Prometheus text format by `render()` for GET /metrics.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _Histogram:
    def __init__(self) -> None:
        self.counts = [0] * len(_BUCKETS)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.total += 1
        self.sum += value
        for i, bound in enumerate(_BUCKETS):
            if value <= bound:
                self.counts[i] += 1


class Metrics:
    """The agent's metric registry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str], int] = defaultdict(int)
        self._latency: dict[str, _Histogram] = defaultdict(_Histogram)
        self._phases: dict[str, _Histogram] = defaultdict(_Histogram)
        self._gauges: dict[str, Callable[[], float]] = {}

    def request(self, verb: str, code: int, seconds: float) -> None:
        with self._lock:
            self._requests[(verb, str(code))] += 1
            self._latency[verb].observe(seconds)

    def phase(self, name: str, seconds: float) -> None:
        with self._lock:
            self._phases[name].observe(seconds)

    def gauge(self, name: str, read: Callable[[], float]) -> None:
        self._gauges[name] = read

    def phase_summary(self) -> dict[str, dict[str, float]]:
        """Mean seconds and count per ADD phase (for benchmarks and the REST view)."""
        with self._lock:
            return {
                name: {"count": h.total, "mean_seconds": h.sum / h.total if h.total else 0.0}
                for name, h in self._phases.items()
            }

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            lines += [
                "# HELP vswitch_cni_requests_total CNI requests by verb and CNI result code.",
                "# TYPE vswitch_cni_requests_total counter",
            ]
            for (verb, code), n in sorted(self._requests.items()):
                lines.append(f'vswitch_cni_requests_total{{verb="{verb}",code="{code}"}} {n}')
            lines += _histogram("vswitch_cni_request_seconds", "verb", self._latency)
            lines += _histogram("vswitch_cni_add_phase_seconds", "phase", self._phases)
        for name, read in sorted(self._gauges.items()):
            lines += [f"# TYPE {name} gauge", f"{name} {read()}"]
        return "\n".join(lines) + "\n"


def _histogram(name: str, label: str, series: dict[str, _Histogram]) -> list[str]:
    lines = [f"# HELP {name} Latency in seconds.", f"# TYPE {name} histogram"]
    for value, h in sorted(series.items()):
        for bound, count in zip(_BUCKETS, h.counts, strict=True):
            lines.append(f'{name}_bucket{{{label}="{value}",le="{bound}"}} {count}')
        lines.append(f'{name}_bucket{{{label}="{value}",le="+Inf"}} {h.total}')
        lines.append(f'{name}_sum{{{label}="{value}"}} {h.sum}')
        lines.append(f'{name}_count{{{label}="{value}"}} {h.total}')
    return lines

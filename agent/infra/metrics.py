"""Prometheus metrics of the agent, on `prometheus-client`: one registry per agent.

Series (docs/metrics.md lists them with their labels):

    vswitch_cni_requests_total{verb,code}       counter: CNI requests by verb and CNI result code
    vswitch_cni_request_seconds{verb}           histogram: handler latency per verb
    vswitch_cni_add_phase_seconds{phase}        histogram: ADD's steps
    vswitch_cni_<gauge>                         gauges read at scrape time (`gauge()`,
                                                `labelled()`): pods, pools, reconcile, etcd and
                                                dataplane state; app/gauges.py registers them
    vswitch_cni_<counter>_total                 counters a part keeps itself, read at scrape
                                                time too (`counted()`)
    process_*                                   the library's process collector (RSS, CPU, fds)

The request path only touches the counter and histograms (the library's own locks); the gauges
are read when /metrics is scraped, so a slow source costs the scraper, never a CNI request. A
gauge whose source fails is left out of that scrape (logged) instead of failing the scrape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

# The buckets the benchmarks' figures were made with (benchmarks/core/agent_metrics.py reads them).
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

LabelledRead = Callable[[], Sequence[tuple[Sequence[str], float]]]  # (label values, value)


class _Gauges(Collector):
    """Gauges (and counters a part of the agent keeps itself) computed at scrape time."""

    def __init__(self) -> None:
        # name -> (help, label names, read, family type)
        self.entries: dict[str, tuple[str, tuple[str, ...], LabelledRead,
                                      type[GaugeMetricFamily | CounterMetricFamily]]] = {}

    def collect(self) -> Iterator[Metric]:
        for name, (help_text, labels, read, kind) in sorted(self.entries.items()):
            try:
                samples = read()
            except Exception as exc:  # a source that is down: no sample this scrape
                log.debug("metric %s not read: %s", name, exc)
                continue
            family = kind(name, help_text, labels=list(labels))
            for values, value in samples:
                family.add_metric(list(values), value)
            yield family


class Metrics:
    """The agent's metric registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "vswitch_cni_requests", "CNI requests by verb and CNI result code (0: success).",
            ["verb", "code"], registry=self.registry,
        )
        self._latency = Histogram(
            "vswitch_cni_request_seconds", "Time the agent took to answer a CNI request.",
            ["verb"], buckets=BUCKETS, registry=self.registry,
        )
        self._phases = Histogram(
            "vswitch_cni_add_phase_seconds", "Time of each step of a CNI ADD.",
            ["phase"], buckets=BUCKETS, registry=self.registry,
        )
        self._vpp_calls = Histogram(
            "vswitch_cni_vpp_call_seconds", "Time VPP took to answer one binary-API request "
            "(a dump: all its details).", ["message"], buckets=BUCKETS, registry=self.registry,
        )
        self._gauges = _Gauges()
        self.registry.register(self._gauges)
        ProcessCollector(registry=self.registry)

    def request(self, verb: str, code: int, seconds: float) -> None:
        self._requests.labels(verb, str(code)).inc()
        self._latency.labels(verb).observe(seconds)

    def phase(self, name: str, seconds: float) -> None:
        self._phases.labels(name).observe(seconds)

    def vpp_call(self, message: str, seconds: float) -> None:
        self._vpp_calls.labels(message).observe(seconds)

    def gauge(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        """A gauge without labels, read at scrape time."""
        self._gauges.entries[name] = (help_text, (), lambda: [((), read())], GaugeMetricFamily)

    def labelled(self, name: str, help_text: str, labels: Sequence[str],
                 read: LabelledRead) -> None:
        """A gauge with labels: `read` returns (label values, value) per series."""
        self._gauges.entries[name] = (help_text, tuple(labels), read, GaugeMetricFamily)

    def counted(self, name: str, help_text: str, labels: Sequence[str],
                read: LabelledRead) -> None:
        """A counter the agent keeps itself (it only grows), read at scrape time like a gauge:
        `name` without `_total`, which the exposition adds."""
        self._gauges.entries[name] = (help_text, tuple(labels), read, CounterMetricFamily)

    def render(self) -> str:
        """The Prometheus text exposition (format 0.0.4) of every series."""
        return generate_latest(self.registry).decode()

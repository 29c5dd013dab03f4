"""Summaries of repeated measurements: n, min, median, p99 (nearest rank), mean."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    """Statistics of one figure over `n` runs, in `unit`."""

    n: int
    min: float
    median: float
    p99: float
    mean: float
    unit: str

    @classmethod
    def of(cls, values: Sequence[float], unit: str) -> Summary:
        if not values:
            raise ValueError("no measurements to summarize")
        ordered = sorted(values)
        # nearest-rank p99: with fewer than 100 runs it is the largest value
        rank = max(1, math.ceil(0.99 * len(ordered)))
        return cls(len(ordered), ordered[0], statistics.median(ordered), ordered[rank - 1],
                   statistics.fmean(ordered), unit)

    def to_json(self) -> dict[str, float | int | str]:
        return {"n": self.n, "min": self.min, "median": self.median, "p99": self.p99,
                "mean": self.mean, "unit": self.unit}


def ratio(ours: float, reference: float) -> float:
    """ours / reference; infinity when the reference took no time at all."""
    return ours / reference if reference > 0 else math.inf

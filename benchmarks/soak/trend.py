"""Is a figure of the soak flat, still growing, or levelling off? (benchmarks/soak/report.py)

A figure's samples (agent RSS, VPP heap, fds, ...) over the run's cycles are split into halves by
cycle, and each half gets a least-squares slope with its standard error:

- the **second half** decides: the first holds the warm-up (allocator arenas, caches, the
  interpreter's first imports), which a fit over the whole run would count as growth;
- the standard error is widened for the samples' **autocorrelation**: a memory figure moves in
  steps that stay (an arena allocated is kept for many samples), so its residuals around the line
  are not independent, and least squares' own error is then too small (it assumes n independent
  samples where there are fewer). With r the lag-1 autocorrelation of the residuals (0 when
  negative, at most 0.9), the error is multiplied by sqrt((1 + r) / (1 - r)), the usual
  correction for a first-order autoregressive series (n_eff = n (1 - r) / (1 + r));
- **flat**: the second half's slope is within two (widened) standard errors of zero, or the change
  it predicts over the whole run is below the figure's resolution (1 MiB of memory, one fd, ...);
- **levels off**: not flat, but the second half's slope is below the first half's by more than two
  standard errors of their difference (still growing, more slowly: a longer run shows whether it
  stops);
- otherwise **grows** (or shrinks).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from itertools import pairwise

Points = list[tuple[float, float]]  # (cycle, value)
MAX_R = 0.9  # the autocorrelation used at most (the widening then is sqrt(19), ~4.4x)


def lag1(residuals: list[float]) -> float:
    """The lag-1 autocorrelation of `residuals` (0 when they are all 0)."""
    total = sum(r * r for r in residuals)
    if total == 0:
        return 0.0
    return sum(a * b for a, b in pairwise(residuals)) / total


def fit_widened(points: Points, widen: bool = True) -> tuple[float, float, float]:
    """(slope, standard error, r): least squares of (x, y); the error widened for the lag-1
    autocorrelation r of the residuals (module docstring) unless `widen` is False."""
    if len(points) < 3:
        return 0.0, 0.0, 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0, 0.0, 0.0
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    residuals = [y - my - slope * (x - mx) for x, y in points]
    se = math.sqrt(sum(r * r for r in residuals) / (len(points) - 2) / sxx)
    r = min(max(lag1(residuals), 0.0), MAX_R)
    if widen:
        se *= math.sqrt((1 + r) / (1 - r))
    return slope, se, r


@dataclass(frozen=True)
class Trend:
    """Slopes per cycle (the report shows them per 1,000 cycles) and the verdict."""

    early: float  # first half
    early_se: float
    late: float  # second half
    late_se: float
    whole: float
    first: float  # the first and the last sample
    last: float
    verdict: str  # "flat", "levels off", "grows", "shrinks"


def halves(points: Points) -> tuple[Points, Points]:
    """The samples of the first and of the second half of the run's cycles (the middle one in
    both: each half's line then spans its whole half)."""
    middle = points[0][0] + (points[-1][0] - points[0][0]) / 2
    return [p for p in points if p[0] <= middle], [p for p in points if p[0] >= middle]


def trend(points: Points, resolution: float) -> Trend | None:
    """The trend of a figure's samples; None with fewer than two."""
    if len(points) < 2:
        return None
    early_points, late_points = halves(points)
    if len(late_points) < 4:  # too few to split: the whole run for both
        early_points = late_points = points
    early, early_se, _ = fit_widened(early_points)
    late, late_se, _ = fit_widened(late_points)
    whole, _, _ = fit_widened(points)
    span = points[-1][0] - points[0][0]
    if abs(late) <= 2 * late_se or abs(late) * span < resolution:
        verdict = "flat"
    elif late > 0 and early - late > 2 * math.hypot(early_se, late_se):
        verdict = "levels off"
    else:
        verdict = "grows" if late > 0 else "shrinks"
    return Trend(early, early_se, late, late_se, whole, points[0][1], points[-1][1], verdict)

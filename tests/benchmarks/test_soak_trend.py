"""How the soak judges a figure flat, growing or levelling off (benchmarks/soak/trend.py).

Test plan, on made-up series (no soak run):
- a line with alternating noise: its slope comes back exactly, the noise's negative
  autocorrelation does not narrow the error, and it grows;
- the same slope moving in steps of 8 samples: least squares' own error is widened (the
  residuals are autocorrelated), by sqrt((1 + r) / (1 - r));
- constant samples, and a change below the figure's resolution, are flat;
- growth that saturates (fast in the first half, slow in the second) levels off; once it has
  stopped, the second half is flat however fast the first half grew;
- the halves split at the middle cycle; with too few samples both halves are the whole run;
  fewer than two samples give no trend.
"""

from __future__ import annotations

import math

import pytest

from benchmarks.soak.trend import fit_widened, halves, lag1, trend


def series(values: list[float], step: float = 50.0) -> list[tuple[float, float]]:
    return [(i * step, v) for i, v in enumerate(values)]


def test_a_line_with_alternating_noise_grows_at_its_slope() -> None:
    points = series([100.0 + 0.4 * 50 * i + (3 if i % 2 else -3) for i in range(40)])
    slope, se, r = fit_widened(points)
    assert slope == pytest.approx(0.4, rel=0.01)
    assert r == 0.0  # negative autocorrelation is not used to narrow the error
    assert se == pytest.approx(fit_widened(points, widen=False)[1])
    got = trend(points, resolution=100)  # it rises by ~780 over the run
    assert got is not None and got.verdict == "grows"
    assert got.late == pytest.approx(0.4, rel=0.05) and got.whole == pytest.approx(0.4, rel=0.01)


def test_steps_that_stay_widen_the_error() -> None:
    values = [100.0 + 160.0 * (i // 8) for i in range(64)]  # 0.4 per cycle on average
    points = series(values)
    slope, plain, _ = fit_widened(points, widen=False)
    _, widened, r = fit_widened(points)
    residuals = [y - (sum(values) / len(values)) - slope * (x - points[-1][0] / 2)
                 for x, y in points]
    assert 0.3 < r <= 0.9 and r == pytest.approx(lag1(residuals))
    assert widened == pytest.approx(plain * math.sqrt((1 + r) / (1 - r)))


def test_constant_and_sub_resolution_changes_are_flat() -> None:
    flat = trend(series([70_000.0] * 30), resolution=1024)
    assert flat is not None and flat.verdict == "flat" and flat.late == 0 and flat.late_se == 0
    tiny = trend(series([70_000.0 + 0.001 * i for i in range(30)]), resolution=1024)
    assert tiny is not None and tiny.verdict == "flat"  # 0.7 KiB over the run: below 1 MiB


def test_saturating_growth_levels_off_and_stopped_growth_is_flat() -> None:
    # 8 MiB approached with a time constant of 1,500 cycles, sampled every 50 for 6,000 cycles
    slowing = [70_000 + 8192 * (1 - math.exp(-50 * i / 1500)) for i in range(121)]
    got = trend(series(slowing), resolution=1024)
    assert got is not None and got.verdict == "levels off"
    assert got.early > 4 * got.late > 0
    # the same, then nothing more for as long again: the second half is flat
    stopped = slowing[:40] + [slowing[39]] * 81
    got = trend(series(stopped), resolution=1024)
    assert got is not None and got.verdict == "flat" and got.early > 0


def test_halves_and_short_runs() -> None:
    points = series([float(i) for i in range(11)])  # cycles 0..500, middle 250
    early, late = halves(points)
    assert early[-1][0] == 250 and late[0][0] == 250 and early[0][0] == 0 and late[-1][0] == 500
    short = trend(series([1.0, 2.0, 3.0, 4.0, 5.0]), resolution=0.5)
    assert short is not None and short.early == short.late == pytest.approx(1 / 50)
    assert trend(series([1.0]), resolution=1) is None

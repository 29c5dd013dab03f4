"""Markdown for the sections: numbers, tables, and the n / min / median / p99 row of a Summary."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from benchmarks.core.stats import Summary

STAT_HEADER = ("figure", "n", "min", "median", "p99", "unit")


def fmt(value: float, digits: int = 1) -> str:
    """`value` with `digits` decimals; "inf" for what is not finite."""
    return f"{value:.{digits}f}" if math.isfinite(value) else "inf"


def md_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


def stat_row(label: str, s: Summary, digits: int = 1) -> list[str]:
    return [label, str(s.n), fmt(s.min, digits), fmt(s.median, digits), fmt(s.p99, digits), s.unit]

"""A target from an issue beside what was measured: met, or missed and by how much."""

from __future__ import annotations

import math
from dataclasses import dataclass

from benchmarks.core.markdown import fmt as _n


@dataclass(frozen=True)
class Target:
    name: str
    measured: float
    goal: float
    unit: str
    at_least: bool = False  # True: measured must be >= goal
    where: str = ""

    @property
    def met(self) -> bool:
        return self.measured >= self.goal if self.at_least else self.measured <= self.goal

    def verdict(self) -> str:
        if self.goal == 0 or not math.isfinite(self.measured):
            return "n/a"
        off = (self.measured - self.goal) / self.goal * 100
        if self.met:
            return f"met ({abs(off):.0f}% {'above' if self.at_least else 'under'} the target)"
        word = "short of" if self.at_least else "over"
        return (f"**missed**: {_n(abs(self.measured - self.goal), 2)} {self.unit} "
                f"({abs(off):.0f}%) {word} the target{'; ' + self.where if self.where else ''}")


def table(targets: list[Target]) -> list[str]:
    """The targets as a markdown table (target, measured, goal, verdict), or nothing."""
    if not targets:
        return []
    rows = [f"| {t.name} | {_n(t.measured, 2)} {t.unit} | {'≥' if t.at_least else '≤'} "
            f"{_n(t.goal, 1)} {t.unit} | {t.verdict()} |" for t in targets]
    return ["| target | measured | goal | verdict |", "| --- | --- | --- | --- |", *rows, ""]

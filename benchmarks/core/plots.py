"""The benchmarks' pictures: SVG files beside the markdown they illustrate, drawn with matplotlib's
Agg backend (no display needed; matplotlib is a dev dependency, like the benchmarks).

Three shapes cover every section: `cdf` (latency distributions, one step line per series),
`bars` (grouped bars: categories on the x axis, a bar per series in each) and `lines` (trends
over cycles). Each takes panels (side by side, three to a row) and writes one SVG, with one
legend for the whole figure: a series has the same colour in every panel.

The files are made to be checked and diffed: text stays text (`svg.fonttype: none`), so every
series' label is in the SVG (`svg_series` reads them back, which is what the tests check), and
two runs with the same numbers write the same bytes (a fixed hash salt, no date).

A command writes its pictures into `plot_dir(out)`, `docs/benchmarks/` beside its --out markdown
file, and puts `embed(...)` into its section, a link relative to that file.
"""

from __future__ import annotations

import math
import re
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display, the same output everywhere

import matplotlib.pyplot as plt

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.typing import RcKeyType  # matplotlib 3.10's name for rcParams' keys

PLOT_SUBDIR = Path("docs") / "benchmarks"
STYLE: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",  # labels as <text>, not glyph paths
    "svg.hashsalt": "vswitch-cni",  # stable element ids: the same numbers give the same file
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
}
NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class Bars:
    """One panel of grouped bars: per category on the x axis, a bar per series."""

    title: str
    ylabel: str
    groups: Mapping[str, Mapping[str, float]]  # category -> series label -> value


@dataclass(frozen=True)
class Lines:
    """One panel of trends: per series, y over x."""

    title: str
    ylabel: str
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]]  # label -> (xs, ys)


def plot_dir(out: Path) -> Path:
    """Where the pictures of the markdown file `out` go: docs/benchmarks/ beside it."""
    return out.resolve().parent / PLOT_SUBDIR


def embed(name: str, title: str) -> str:
    """The markdown line showing picture `name` from a file whose plots are in plot_dir()."""
    return f"![{title}]({(PLOT_SUBDIR / f'{name}.svg').as_posix()})"


def cdf(path: Path, title: str, panels: Mapping[str, Mapping[str, Sequence[float]]],
        xlabel: str, ylabel: str = "share of runs") -> Path:
    """Cumulative distributions: per panel (its title), per series (its label), the share of
    values at or below x. A series without values is left out of its panel."""
    labels = _order(label for series in panels.values() for label in series)
    with _drawing(path, title, len(panels)) as axes:
        for i, (ax, (name, series)) in enumerate(zip(axes, panels.items(), strict=False)):
            ax.set(title=name, xlabel=xlabel, ylabel=ylabel, ylim=(0, 1.02))
            drawn = [label for label, values in series.items() if values]
            for label in drawn:
                xs = sorted(series[label])
                ys = [(k + 1) / len(xs) for k in range(len(xs))]
                ax.step([xs[0], *xs], [0.0, *ys], where="post", label=label,
                        color=_color(labels, label), gid=_gid(i, label))
            _finish(ax, bool(drawn))
    return path


def bars(path: Path, title: str, panels: Sequence[Bars]) -> Path:
    """Grouped bars, a panel each; a value that is missing or not finite draws no bar."""
    labels = _order(label for p in panels for group in p.groups.values() for label in group)
    with _drawing(path, title, len(panels)) as axes:
        for i, (ax, panel) in enumerate(zip(axes, panels, strict=False)):
            ax.set(title=panel.title, ylabel=panel.ylabel)
            present = _order(label for group in panel.groups.values() for label in group)
            width = 0.8 / max(len(present), 1)
            drawn = False
            for k, label in enumerate(present):
                points = [(g - 0.4 + width * (k + 0.5), value)
                          for g, group in enumerate(panel.groups.values())
                          if (value := group.get(label)) is not None and math.isfinite(value)]
                if points:
                    ax.bar([x for x, _ in points], [y for _, y in points], width, label=label,
                           color=_color(labels, label), gid=_gid(i, label))
                    drawn = True
            ax.set_xticks(range(len(panel.groups)),
                          [textwrap.fill(name, 16) for name in panel.groups])
            ax.grid(axis="x", visible=False)
            _finish(ax, drawn)
    return path


def lines(path: Path, title: str, panels: Sequence[Lines], xlabel: str) -> Path:
    """Trends, a panel each, a line with markers per series; a series without points is left
    out."""
    labels = _order(label for p in panels for label in p.series)
    with _drawing(path, title, len(panels)) as axes:
        for i, (ax, panel) in enumerate(zip(axes, panels, strict=False)):
            ax.set(title=panel.title, xlabel=xlabel, ylabel=panel.ylabel)
            drawn = [label for label, (xs, _) in panel.series.items() if xs]
            for label in drawn:
                xs, ys = panel.series[label]
                ax.plot(list(xs), list(ys), marker="o", markersize=3, label=label,
                        color=_color(labels, label), gid=_gid(i, label))
            _finish(ax, bool(drawn))
    return path


def svg_series(path: Path) -> set[str]:
    """Every text of the SVG at `path` (titles, axis labels, legends: the series' labels).
    Raises ValueError when the file is not XML with an <svg> root."""
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        raise ValueError(f"{path}: not XML: {exc}") from exc
    if root.tag.rsplit("}", 1)[-1] != "svg":
        raise ValueError(f"{path}: the root is <{root.tag}>, not <svg>")
    texts = ("".join(el.itertext()).strip() for el in root.iter()
             if el.tag.rsplit("}", 1)[-1] == "text")
    return {t for t in texts if t}


# --- the parts every figure shares ----------------------------------------------------------

@contextmanager
def _drawing(path: Path, title: str, panels: int) -> Iterator[list[Axes]]:
    """A figure of `panels` axes (three to a row; four as two by two) under the style, one
    legend for all of them below (a series has one colour in every panel), saved to `path` as
    SVG when the block ends without an error; closed in any case."""
    with plt.rc_context(STYLE):
        n = max(panels, 1)
        cols = 2 if n == 4 else min(n, 3)
        rows = math.ceil(n / cols)
        fig, grid = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.4 * rows + 0.8),
                                 squeeze=False, layout="constrained")
        try:
            axes = [ax for row in grid for ax in row]
            for ax in axes[n:]:
                ax.set_visible(False)
            fig.suptitle(title)
            yield axes[:n]
            handles: dict[str, Artist] = {}
            for ax in axes[:n]:
                for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                    handles.setdefault(label, handle)
            if handles:
                fig.legend(list(handles.values()), list(handles), loc="outside lower center",
                           ncol=min(len(handles), 4), frameon=False)
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, format="svg", metadata={"Date": None})
        finally:
            plt.close(fig)


def _finish(ax: Axes, drawn: bool) -> None:
    if not drawn:
        ax.text(0.5, 0.5, NOT_MEASURED, transform=ax.transAxes, ha="center", va="center")


def _order(labels: Iterable[str]) -> list[str]:
    """Labels in the order first seen, once each: the colour of a series in every panel."""
    return list(dict.fromkeys(labels))


def _color(labels: list[str], label: str) -> str:
    return f"C{labels.index(label) % 10}"


def _gid(panel: int, label: str) -> str:
    """The id of a series' element in the SVG (unique per panel, XML-safe)."""
    return f"series-{panel}-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-")

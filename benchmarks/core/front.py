"""BENCHMARKS.md's first screen: the headline table, drawn from the sections below it, and each
section's status line (the commit it measured; **stale** once the code it measures changed).

A headline figure names the table row of a section that holds it (the last such row: a section
that gained a newer run below an older one shows the newer) and its anchor: the reference
plugins for the CNI path, the kernel dataplane for VPP, a bare veth pair for the kernel; or only
the target of its issue. `refresh` rewrites the head and the status lines and puts the sections
in the catalog's order; the sections' own text is left as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from benchmarks.core.catalog import CATALOG
from benchmarks.core.markdown import md_table
from benchmarks.core.sections import MARKED, STAMP, Stamp, digest, git_out, stamp_of, subjects_of

STATUS = re.compile(r"^\*\*?(?:Measured|Stale|Not stamped).*<!-- status -->\n\n?", re.M)


@dataclass(frozen=True)
class Cell:
    """A value in a section's tables: the last row whose first cells are `row`, in `column`."""

    section: str
    row: tuple[str, ...]
    column: str
    prefix: bool = False  # the row's last named cell only starts with row[-1]


@dataclass(frozen=True)
class Headline:
    figure: str
    unit: str
    value: Cell
    anchor_label: str = ""
    anchor: Cell | None = None
    target: str = ""  # the goal and the issue that set it


def _cni(row: str, column: str = "median") -> Cell:
    return Cell("cni", (row,), column)


HEADLINES: tuple[Headline, ...] = (
    Headline("CNI ADD, kernel dataplane (median)", "ms", _cni("ADD vswitch-cni"),
             "bridge+host-local", _cni("ADD bridge+host-local"), "≤ 1.5x the reference (#13)"),
    Headline("CNI DEL, kernel dataplane (median)", "ms", _cni("DEL vswitch-cni"),
             "bridge+host-local", _cni("DEL bridge+host-local"), "≤ 1.0x the reference (#13)"),
    Headline("CNI ADD, VPP dataplane (median)", "ms", _cni("ADD vswitch-cni (vpp)"),
             "bridge+host-local", _cni("ADD bridge+host-local")),
    Headline("pods/s with 16 runtimes at once (median)", "pods/s",
             Cell("cni", ("ADD vswitch-cni (N =",), "median", prefix=True),
             "bridge+host-local", Cell("cni", ("ADD bridge+host-local (N =",), "median",
                                       prefix=True), "≥ 0.8x the reference (#13)"),
    Headline("agent RSS after 250 ADDs (median)", "MB",
             Cell("cni", ("agent, after",), "median", prefix=True), target="≤ 80 MB (#7)"),
    Headline("pod to pod TCP on one node, kernel dataplane", "Gbit/s",
             Cell("traffic", ("kernel dataplane",), "TCP Gbit/s"), "bare veth pair",
             Cell("traffic", ("bare veth pair (floor)",), "TCP Gbit/s")),
    Headline("pod to pod TCP on one node, VPP dataplane (default rings)", "Gbit/s",
             Cell("traffic", ("VPP dataplane, AF_PACKET v2-14-16",), "TCP Gbit/s", prefix=True),
             "kernel dataplane", Cell("traffic", ("kernel dataplane",), "TCP Gbit/s"),
             "≥ 2 Gbit/s (#18)"),
    Headline("pod to pod TCP across nodes, VPP on a core of its own", "Gbit/s",
             Cell("vpp-core", ("TCP Gbit/s, pod -> pod, across nodes, IPv4",),
                  "`vpp-own-core-2-nodes`"),
             "kernel dataplane", Cell("vpp-core", ("TCP Gbit/s, pod -> pod, across nodes, IPv4",),
                                      "`kernel-2-nodes`"), "≥ 0.8x the kernel per CPU (#40)"),
    Headline("NetworkPolicy created -> denied, kernel (p99)", "ms",
             Cell("policy-enforce", ("kernel", "created: denied"), "p99 ms"),
             target="≤ 100 ms on a quiet node (#39)"),
    Headline("NetworkPolicy at 5,000 nodes: agent RSS", "MiB",
             Cell("policy-scale", ("RSS ≤ 500 MiB",), "measured"), target="≤ 500 MiB (#39)"),
    Headline("API server sends under pod events, 50 agents' watches", "KiB/s",
             Cell("api-load", ("50",), "KiB/s sent under events"), "1 agent",
             Cell("api-load", ("1",), "KiB/s sent under events"),
             "grows with the cluster, not agents x cluster (#39)"),
    Headline("node mesh: 1,000 nodes converged, from agent start", "s",
             Cell("mesh-scale", ("converge, from agent start",), "value")),
)


def tables(text: str) -> list[list[dict[str, str]]]:
    """The markdown tables of `text`, each a list of rows (header -> cell)."""
    out: list[list[dict[str, str]]] = []
    lines = text.splitlines()
    i = 0
    while i + 1 < len(lines):
        if lines[i].startswith("|") and re.match(r"^\|(\s*:?-{3,}:?\s*\|)+\s*$", lines[i + 1]):
            header = _cells(lines[i])
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(dict(zip(header, _cells(lines[i]), strict=False)))
                i += 1
            out.append(rows)
        else:
            i += 1
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def number(cell: str) -> float | None:
    """The first number of a cell ("12.62 (12.48-14.40)" -> 12.62, "p50 10.8 ms" -> 10.8)."""
    found = re.search(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?", cell.replace("**", ""))
    return float(found.group(0).replace(",", "")) if found else None


def lookup(cell: Cell, sections: dict[str, str]) -> float | None:
    text = sections.get(cell.section)
    if text is None:
        return None
    found = None
    for table in tables(text):
        for row in table:
            values = list(row.values())
            head, last = values[:len(cell.row) - 1], values[len(cell.row) - 1:len(cell.row)]
            if head != list(cell.row[:-1]) or not last:
                continue
            named = last[0] == cell.row[-1] or (cell.prefix and last[0].startswith(cell.row[-1]))
            if named and cell.column in row:
                found = number(row[cell.column])
    return found


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@dataclass(frozen=True)
class Status:
    stamp: Stamp | None
    stale_by: int  # commits touching the subjects since; -1: unknown
    fresh: bool

    def line(self, name: str) -> str:
        run = f"`python -m benchmarks run {name}`"
        if self.stamp is None:
            return (f"**Not stamped**: written before sections recorded what they measured; "
                    f"rerun {run}. <!-- status -->")
        when = self.stamp.date[:10]
        measured = f"commit {self.stamp.commit[:10]} ({when})"
        if self.fresh:
            return (f"*Measured on {measured}; the code it measures ({_subjects(name)}) has not "
                    f"changed since.* <!-- status -->")
        since = f"{self.stale_by} commit(s)" if self.stale_by >= 0 else "commits"
        return (f"**Stale**: measured on {measured}; the code it measures ({_subjects(name)}) "
                f"changed in {since} since; rerun {run}. <!-- status -->")


def _subjects(name: str) -> str:
    return ", ".join(subjects_of(name)) or "none named"


def status(name: str, section: str) -> Status:
    stamp = stamp_of(section)
    if stamp is None:
        return Status(None, -1, False)
    fresh = stamp.digest == digest(subjects_of(name))
    count = git_out("rev-list", "--count", f"{stamp.commit}..HEAD", "--",
                    *subjects_of(name)).strip()
    return Status(stamp, int(count) if count.isdigit() else -1, fresh)


def _with_status(name: str, section: str, line: str) -> str:
    """`section` with `line` under its heading (or its markers, where it has no heading)."""
    section = STATUS.sub("", section, count=1)
    heading = re.search(r"^## .*\n\n?", section, re.M)
    stamp = STAMP.search(section)
    if heading is not None:
        return section[:heading.end()] + line + "\n\n" + section[heading.end():]
    at = stamp.end() if stamp else section.index("\n") + 1
    return section[:at] + line + "\n" + section[at:]


def refresh(path: Path) -> None:
    """Rewrites `path`'s head and status lines; the sections keep their text, in catalog order."""
    text = path.read_text() if path.exists() else ""
    found = {m.group(1): m.group(0) for m in MARKED.finditer(text)}
    order = [b.name for b in CATALOG if b.name in found]
    order += [name for name in found if name not in order]
    states = {name: status(name, found[name]) for name in order}
    sections = {name: _with_status(name, found[name], states[name].line(name)) for name in order}
    head = headline(sections, states)
    path.write_text("\n\n".join([head, *(sections[n] for n in order)]) + "\n")


def headline(sections: dict[str, str], states: dict[str, Status]) -> str:
    rows = []
    for h in HEADLINES:
        value = lookup(h.value, sections)
        if value is None:
            continue
        anchor = lookup(h.anchor, sections) if h.anchor else None
        ratio = f"{value / anchor:.2f}x" if anchor else ""
        state = states.get(h.value.section)
        stamp = state.stamp if state else None
        when = f"{stamp.date[:10]}, {stamp.commit[:7]}" if stamp else "not stamped"
        if state is not None and not state.fresh:
            when += " **stale**"
        heading = re.search(r"^## (.+)$", sections[h.value.section], re.M)
        link = f"[{h.value.section}](#{slug(heading.group(1))})" if heading else h.value.section
        rows.append([h.figure, f"{value:g} {h.unit}",
                     f"{h.anchor_label} {anchor:g} {h.unit}" if anchor else "",
                     ratio, h.target, when, link])
    intro = ("# Benchmarks\n\nThe first questions first: each figure below beside its anchor (the "
             "reference bridge + host-local plugins for the CNI path, the kernel dataplane for "
             "VPP, a bare veth pair for the kernel) and its target, from the section that "
             "measured it, with that section's date and commit. **stale**: the code it measures "
             "changed since. Written by `python -m benchmarks report` (and after every `python "
             "-m benchmarks run`) from the sections below; each section is its benchmark's own, "
             "and says what it measured and how to rerun it.\n\n")
    marker = "<!-- headline: written by python -m benchmarks report from the sections below -->"
    return intro + marker + "\n\n" + "\n".join(md_table(
        ("figure", "measured", "anchor", "ratio", "target", "measured on", "section"),
        rows)).rstrip()

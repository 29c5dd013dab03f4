"""BENCHMARKS.md's sections and first screen (benchmarks.core.sections, benchmarks.core.front).

Test plan:
- a table cell is found by its row's first cells and its column, the last such row winning (a
  section's newer run below an older one), by prefix where asked; numbers are read from cells;
- writing a section stamps it with HEAD and its subjects' digest, under its begin marker, once,
  and leaves the other sections as they were;
- a section stamped now is fresh; one stamped with the digest of an old commit whose subjects
  differ is stale, with the commits since counted; one without a stamp says so;
- `refresh` puts the sections in the catalog's order under the headline table, whose rows carry
  the section's date, commit and link; a second refresh changes nothing;
- the repository's own BENCHMARKS.md: every section is stamped and known to the catalog, and the
  headline's CNI rows against the reference plugins resolve.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from benchmarks.core import front
from benchmarks.core.catalog import CATALOG
from benchmarks.core.sections import (
    MARKED,
    Stamp,
    digest,
    markers,
    stamp_of,
    subjects_of,
    write_section,
)
from testbed.tools import REPO

TEXT = """\
| figure | n | median | unit |
| --- | --- | --- | --- |
| ADD vswitch-cni | 5 | 30.0 | ms |
| ADD vswitch-cni (vpp) | 5 | 50.0 | ms |

| dataplane | change | p99 ms |
| --- | --- | --- |
| kernel | created: denied | 1,201.5 |

| figure | n | median | unit |
| --- | --- | --- | --- |
| ADD vswitch-cni | 5 | 25.0 (20.0-31.0) | ms |
| ADD vswitch-cni (N = 200) | 3 | 70.1 | pods/s |
"""


def test_a_cell_is_the_last_row_that_matches() -> None:
    sections = {"cni": TEXT}
    assert front.lookup(front.Cell("cni", ("ADD vswitch-cni",), "median"), sections) == 25.0
    assert front.lookup(front.Cell("cni", ("ADD vswitch-cni (vpp)",), "median"), sections) == 50.0
    assert front.lookup(front.Cell("cni", ("ADD vswitch-cni (N =",), "median", prefix=True),
                        sections) == 70.1
    assert front.lookup(front.Cell("cni", ("kernel", "created: denied"), "p99 ms"),
                        sections) == 1201.5
    assert front.lookup(front.Cell("cni", ("ADD nothing",), "median"), sections) is None
    assert front.lookup(front.Cell("other", ("ADD vswitch-cni",), "median"), sections) is None
    assert front.number("p50 10.8 ms, max 161.7 ms") == 10.8


def _section(name: str, body: str) -> str:
    begin, end = markers(name)
    return f"{begin}\n## {name} heading\n\n{body}\n{end}\n"


def test_writing_a_section_stamps_it_once_and_keeps_the_others(tmp_path: Path) -> None:
    out = tmp_path / "B.md"
    write_section(out, _section("mesh-scale", "first"), *markers("mesh-scale"))
    write_section(out, _section("traffic", "other"), *markers("traffic"))
    write_section(out, _section("mesh-scale", "second"), *markers("mesh-scale"))
    text = out.read_text()
    found = {m.group(1): m.group(0) for m in MARKED.finditer(text)}
    assert list(found) == ["mesh-scale", "traffic"]
    assert "second" in found["mesh-scale"] and "first" not in text and "other" in text
    assert found["mesh-scale"].count("<!-- measured:") == 1
    stamp = stamp_of(found["mesh-scale"])
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert stamp is not None and stamp.commit == head
    assert stamp.digest == digest(subjects_of("mesh-scale"))


def _first_commit_where_subjects_differ(name: str) -> str:
    """An older commit whose tree of `name`'s subjects differs from today's (one always does:
    the subjects were written over many commits)."""
    now = digest(subjects_of(name))
    log = subprocess.run(["git", "log", "--format=%H", "--", *subjects_of(name)], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout.split()
    for commit in log[1:]:
        old = digest(subjects_of(name), commit + "^")
        if old != now:
            return commit + "^"
    raise AssertionError("no history of the subjects")


def test_fresh_stale_and_unstamped() -> None:
    name = "mesh-scale"
    now = Stamp("HEAD", "2026-11-28T00:00Z", digest(subjects_of(name)))
    section = _section(name, f"{now.line()}\nbody")
    assert front.status(name, section).fresh
    old_commit = subprocess.run(["git", "rev-parse", _first_commit_where_subjects_differ(name)],
                                cwd=REPO, capture_output=True, text=True,
                                check=True).stdout.strip()
    old = Stamp(old_commit, "2026-01-01T00:00Z", digest(subjects_of(name), old_commit))
    state = front.status(name, _section(name, f"{old.line()}\nbody"))
    assert not state.fresh and state.stale_by >= 1
    assert "**Stale**" in state.line(name) and old_commit[:10] in state.line(name)
    assert "Not stamped" in front.status(name, _section(name, "body")).line(name)


def test_refresh_orders_the_sections_under_the_headline_and_is_stable(tmp_path: Path) -> None:
    out = tmp_path / "B.md"
    write_section(out, _section("traffic", "| setup | TCP Gbit/s |\n| --- | --- |\n"
                                "| bare veth pair (floor) | 20.0 |\n"
                                "| kernel dataplane | 15.0 |"), *markers("traffic"))
    write_section(out, _section("cni", TEXT.replace("| ADD vswitch-cni | 5 | 30.0 | ms |\n", "")
                                + "| ADD bridge+host-local | 5 | 20.0 | ms |\n"), *markers("cni"))
    front.refresh(out)
    text = out.read_text()
    assert text.startswith("# Benchmarks\n")
    assert [m.group(1) for m in MARKED.finditer(text)] == ["cni", "traffic"]  # catalog order
    headline = text[:text.index("<!-- cni: begin")]
    assert "| CNI ADD, kernel dataplane (median) | 25 ms | bridge+host-local 20 ms | 1.25x |" \
        in headline
    assert "| pod to pod TCP on one node, kernel dataplane | 15 Gbit/s | bare veth pair 20 " \
        "Gbit/s | 0.75x |" in headline
    assert "[cni](#cni-heading)" in headline and "[traffic](#traffic-heading)" in headline
    assert text.count("<!-- status -->") == 2 and "*Measured on commit" in text
    front.refresh(out)
    assert out.read_text() == text


def test_the_repositorys_benchmarks_md_is_stamped_and_headlined() -> None:
    text = (REPO / "BENCHMARKS.md").read_text()
    found = {m.group(1): m.group(0) for m in MARKED.finditer(text)}
    assert set(found) <= {b.name for b in CATALOG}, set(found) - {b.name for b in CATALOG}
    assert all(stamp_of(section) is not None for section in found.values())
    for section in found.values():
        assert section.count("<!-- status -->") == 1
    for figure in ("CNI ADD, kernel dataplane (median)", "CNI DEL, kernel dataplane (median)"):
        assert f"| {figure} |" in text[:text.index("<!-- cni: begin")]

"""BENCHMARKS.md as sections, one per benchmark, each between `<!-- NAME: begin ... -->` and
`<!-- NAME: end -->`. A benchmark replaces its own section (or appends it) and leaves the others
as they are; the file's head (the headline table) is benchmarks.core.front's.

Writing a section stamps it: a hidden line under its begin marker records the commit it measured,
the time, and a digest of its subjects (the code its catalog entry says it measures, as git
blobs) so that benchmarks.core.front can tell later whether that code changed since.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.core.catalog import BY_NAME
from benchmarks.core.harness import REPO

MARKED = re.compile(r"<!-- ([a-z0-9-]+): begin .*?-->.*?<!-- \1: end -->", re.DOTALL)
STAMP = re.compile(r"^<!-- measured: commit=(\S+) date=(\S+) subjects=(\S+) -->\n", re.M)


def markers(name: str) -> tuple[str, str]:
    """The begin and end markers of benchmark `name`'s section."""
    return (f"<!-- {name}: begin (written by python -m benchmarks run {name}) -->",
            f"<!-- {name}: end -->")


@dataclass(frozen=True)
class Stamp:
    commit: str
    date: str
    digest: str

    def line(self) -> str:
        return f"<!-- measured: commit={self.commit} date={self.date} subjects={self.digest} -->"


def git_out(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
    return out.stdout if out.returncode == 0 else ""


def _blob_sha(data: bytes) -> str:
    """What `git hash-object` prints for a file holding `data`."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def digest(subjects: Iterable[str], commit: str | None = None) -> str:
    """A digest of the tracked files under `subjects`: at `commit`, or as they are on disk now
    (uncommitted edits count: they are what a run measures)."""
    paths = list(subjects)
    if not paths:
        return "none"
    if commit is not None:
        listing = git_out("ls-tree", "-r", commit, "--", *paths)
        files = sorted((line.split("\t", 1)[1], line.split()[2])
                       for line in listing.splitlines())
    else:
        names = git_out("ls-files", "--", *paths).splitlines()
        files = sorted((name, _blob_sha((REPO / name).read_bytes())) for name in names
                       if (REPO / name).is_file())
    text = "".join(f"{name} {sha}\n" for name, sha in files)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def subjects_of(name: str) -> tuple[str, ...]:
    bench = BY_NAME.get(name)
    return bench.subjects if bench else ()


def stamp_now(name: str) -> Stamp:
    commit = git_out("rev-parse", "HEAD").strip() or "unknown"
    return Stamp(commit, datetime.now(UTC).strftime("%Y-%m-%dT%H:%MZ"),
                 digest(subjects_of(name)))


def stamp_of(section: str) -> Stamp | None:
    found = STAMP.search(section)
    return Stamp(*found.groups()) if found else None


def _stamped(section: str, begin: str) -> str:
    """`section` with its stamp line (a fresh one) right under its begin marker."""
    name = re.match(r"<!-- ([a-z0-9-]+): begin", begin)
    if name is None or not section.startswith(begin):
        return section
    body = STAMP.sub("", section[len(begin):].lstrip("\n"), count=1)
    return f"{begin}\n{stamp_now(name.group(1)).line()}\n{body}"


def kept_sections(path: Path) -> str:
    """Every marked section of `path`, in the file's order, markers included; "" when none."""
    try:
        text = path.read_text()
    except OSError:
        return ""
    return "".join(m.group(0) + "\n" for m in MARKED.finditer(text))


def write_section(path: Path, section: str, begin: str, end_marker: str) -> None:
    """Replaces the section of `path` between `begin` and `end_marker` (or appends it), stamped
    with what it measured; the rest of the file stays as it is."""
    section = _stamped(section, begin)
    text = path.read_text() if path.exists() else ""
    start, end = text.find(begin), text.find(end_marker)
    if 0 <= start < end:
        text = text[:start] + section.rstrip("\n") + text[end + len(end_marker):]
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + section
    path.write_text(text)


def publish(figures: Mapping[str, Any], text: str, out: Path, begin: str, end: str,
            json_path: Path | None = None) -> None:
    """A benchmark's ending: its figures as JSON (when asked), its section printed and
    written into `out` between its markers."""
    if json_path is not None:
        json_path.write_text(json.dumps(figures, indent=1, default=str) + "\n")
    print(text)
    write_section(out, text, begin, end)

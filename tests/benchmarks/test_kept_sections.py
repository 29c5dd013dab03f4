"""A full `benchmarks.cni.suite` rewrites BENCHMARKS.md but keeps the sections other commands wrote
between their markers, whatever their name (the k8s tier's among them), in the file's order.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.core.sections import kept_sections


def test_every_marked_section_is_kept_in_order(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    out.write_text(
        "# generated\n\n<!-- soak: begin (written by a) -->\nsoak\n<!-- soak: end -->\n"
        "between\n<!-- k8s-bench: begin (written by b --write) -->\nk8s\n"
        "<!-- k8s-bench: end -->\n<!-- half: begin (never ended) -->\ntail\n")
    assert kept_sections(out) == (
        "<!-- soak: begin (written by a) -->\nsoak\n<!-- soak: end -->\n"
        "<!-- k8s-bench: begin (written by b --write) -->\nk8s\n<!-- k8s-bench: end -->\n")
    assert kept_sections(tmp_path / "missing.md") == ""
    # this repo's own file: the sections its commands wrote, none lost
    own = Path(__file__).resolve().parents[2] / "BENCHMARKS.md"
    kept = kept_sections(own)
    for name in ("soak", "mesh-traffic", "k8s-bench", "add-path", "vpp-livelock", "vpp-core"):
        assert f"<!-- {name}: begin" in kept and f"<!-- {name}: end -->" in kept

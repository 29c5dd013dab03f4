"""KnownRecords' mirror on disk (agent/known).

Plan: load() after a restart leaves a copy that already holds the record untouched (same inode:
no rewrite), rewrites a copy that differs or is unreadable, writes a missing one, and removes the
copies of records it was not given; on_disk() reads back what load() kept.
"""

from __future__ import annotations

from pathlib import Path

from agent.known import KnownRecords
from agent.model import PodRecord


def _record(cid: str, address: str) -> PodRecord:
    return PodRecord(cid, "eth0", f"/var/run/netns/{cid}", [address], ["10.9.0.1"],
                     state="ready", wiring={"host_ifname": f"h{cid}"})


def _inodes(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_ino for p in directory.glob("*.json")}


def test_load_rewrites_only_what_differs(tmp_path: Path) -> None:
    first = KnownRecords(tmp_path)
    same, changed, broken, gone = (_record(c, f"10.9.0.{i + 2}/32")
                                   for i, c in enumerate(("same", "changed", "broken", "gone")))
    for record in (same, changed, broken, gone):
        first.remember(record)
    before = _inodes(tmp_path)
    (tmp_path / f"{broken.key.digest(32)}.json").write_bytes(b"\xff not json")
    before_broken = _inodes(tmp_path)[f"{broken.key.digest(32)}.json"]
    fresh = _record("fresh", "10.9.0.9/32")
    moved = _record("changed", "10.9.0.99/32")

    KnownRecords(tmp_path).load([same, moved, broken, fresh])

    after = _inodes(tmp_path)
    assert after[f"{same.key.digest(32)}.json"] == before[f"{same.key.digest(32)}.json"]
    assert after[f"{changed.key.digest(32)}.json"] != before[f"{changed.key.digest(32)}.json"]
    assert after[f"{broken.key.digest(32)}.json"] != before_broken
    assert f"{gone.key.digest(32)}.json" not in after
    assert not list(tmp_path.glob("*.tmp"))
    by_key = {r.key: r for r in KnownRecords(tmp_path).on_disk()}
    assert by_key == {r.key: r for r in (same, moved, broken, fresh)}
    assert len(by_key) == 4

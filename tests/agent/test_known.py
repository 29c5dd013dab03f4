"""KnownRecords' mirror on disk (agent/state/local_records).

Plan: load() after a restart leaves a copy that already holds the record untouched (same inode:
no rewrite), rewrites a copy that differs or is unreadable, writes a missing one, and removes the
copies of records it was not given; on_disk() reads back what load() kept.
A hostile disk (a tmpfs made read-only or filled up): forget and remember never raise, the
copies they could not remove or write are listed as behind and put right by retry() once the
disk works, the trouble is logged once; no temp file outlives a failed write; temp files a
killed agent left are removed at start.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agent.model.pod import PodRecord
from agent.state.local_records import KnownRecords
from tests.faults.disk import fill, read_only, tmpfs


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


# ---- a hostile disk (issue 23): the copy is a cache, never a reason to fail -----------------

def test_a_read_only_disk_fails_nothing_and_is_put_right_later(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with tmpfs(tmp_path / "state", "1m") as state:
        known = KnownRecords(state / "pods")
        old, other = _record("old", "10.9.0.2/32"), _record("other", "10.9.0.3/32")
        known.remember(old)
        known.remember(other)
        new = _record("new", "10.9.0.4/32")
        with caplog.at_level(logging.DEBUG, "agent.state.statedir"), read_only(state):
            known.forget(old.key)  # raised OSError (EROFS) before
            known.forget(other.key)
            known.remember(new)
            assert known.get(old.key) is None and known.get(new.key) == new
            assert set(known.behind()) == {old.key, other.key, new.key}
            assert known.health.problem and "Read-only" in known.health.problem
            for key in known.behind():
                known.retry(key)  # still read-only: still behind, nothing raised
            assert len(known.behind()) == 3
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1, [r.getMessage() for r in errors]
        assert str(state / "pods") in errors[0].getMessage()
        for key in known.behind():
            known.retry(key)
        assert known.behind() == [] and known.health.problem == ""
        assert {r.key for r in known.on_disk()} == {new.key}
        assert "works again" in caplog.text


def test_a_full_disk_leaves_no_temp_file(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "state", "256k") as state:
        known = KnownRecords(state / "pods")
        filler = fill(state)
        known.remember(_record("full", "10.9.0.2/32"))
        assert known.behind() == [_record("full", "10.9.0.2/32").key]
        assert list((state / "pods").iterdir()) == []  # a 0-byte temp file stayed before
        filler.unlink()
        known.retry(_record("full", "10.9.0.2/32").key)
        assert [r.key for r in known.on_disk()] == [_record("full", "10.9.0.2/32").key]


def test_temp_files_a_killed_agent_left_are_swept_at_start(tmp_path: Path) -> None:
    KnownRecords(tmp_path).remember(_record("kept", "10.9.0.2/32"))
    (tmp_path / "0123abcd.140000000000.tmp").write_text("")
    (tmp_path / "4567ef01.140000000001.tmp").write_text('{"half": ')
    KnownRecords(tmp_path)
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".json"]

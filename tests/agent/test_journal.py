"""The DEL journal on disk: what one agent wrote, the next one reads; a damaged entry is set
aside (and logged) instead of stopping the agent. A hostile disk (a tmpfs filled up or made
read-only): an entry that cannot be written is a TryAgainLater leaving no temp file; a settled
entry that cannot be removed is neither read back nor settled again, and is removed once the
disk works, unless a new entry of the same key replaced it; leftover temp files are swept (the
agent's at start, the plugin's once older than any write takes)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from agent.model.pod import PodKey, PodRecord
from agent.state.journal import DeleteJournal, JournalUnwritable
from tests.faults.disk import fill, read_only, tmpfs


def _record(cid: str) -> PodRecord:
    return PodRecord(container_id=cid, ifname="eth0", netns="/run/netns/x",
                     addresses=["10.1.1.2/32"], gateways=["10.1.1.1"], state="ready")


def test_entries_outlive_the_process_and_go_when_removed(tmp_path: Path) -> None:
    first = DeleteJournal(tmp_path / "j")
    first.add(PodKey("a", "eth0"), _record("a"))
    first.add(PodKey("b", "net1"), None)
    second = DeleteJournal(tmp_path / "j")
    assert {p.key: p.record for p in second.pending()} == {
        PodKey("a", "eth0"): _record("a"),
        PodKey("b", "net1"): None,
    }
    assert all(p.detached for p in second.pending())
    second.remove(PodKey("a", "eth0"))
    second.remove(PodKey("a", "eth0"))  # idempotent
    assert PodKey("a", "eth0") not in DeleteJournal(tmp_path / "j")
    assert len(DeleteJournal(tmp_path / "j")) == 1


def test_a_damaged_entry_is_set_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    journal = DeleteJournal(tmp_path / "j")
    journal.add(PodKey("a", "eth0"), _record("a"))
    (tmp_path / "j" / "broken.json").write_text("{not json")
    again = DeleteJournal(tmp_path / "j")
    assert [p.key for p in again.pending()] == [PodKey("a", "eth0")]
    assert (tmp_path / "j" / "broken.corrupt").exists()
    assert "unreadable" in caplog.text


def test_entries_the_plugin_writes_later_are_found_by_a_rescan(tmp_path: Path) -> None:
    journal = DeleteJournal(tmp_path / "j")
    key = PodKey("c" * 64, "eth0")
    (tmp_path / "j" / f"{key.digest(32)}.json").write_text(
        '{"container_id": "' + "c" * 64 + '", "ifname": "eth0", "netns": "/proc/1/ns/net",'
        ' "detached": false, "record": null}'
    )
    assert key not in journal
    journal.rescan()
    entry = journal.get(key)
    assert entry is not None and not entry.detached and entry.netns == "/proc/1/ns/net"


def test_has_sees_an_entry_the_plugin_wrote_since_the_last_rescan(tmp_path: Path) -> None:
    from cni_client.journal import journal_delete

    journal = DeleteJournal(tmp_path / "pending-deletes")
    key = PodKey("late", "eth0")
    assert not journal.has(key)
    journal_delete(str(tmp_path), "late", "eth0", "/run/netns/x")
    assert key not in journal  # the in-memory view alone misses it
    assert journal.has(key)
    entry = journal.get(key)
    assert entry is not None and not entry.detached and entry.netns == "/run/netns/x"
    assert not journal.has(PodKey("late", "net1"))


# ---- a hostile disk (issue 23) ---------------------------------------------------------------

def test_an_entry_a_full_disk_refuses_is_try_again_later_and_leaves_nothing(
        tmp_path: Path) -> None:
    with tmpfs(tmp_path / "state", "256k") as state:
        journal = DeleteJournal(state / "pending-deletes")
        fill(state)
        with pytest.raises(JournalUnwritable) as info:
            journal.add(PodKey("a", "eth0"), _record("a"))
        assert info.value.code == 11
        assert "No space left" in str(info.value) and "pending-deletes" in str(info.value)
        assert list((state / "pending-deletes").iterdir()) == []  # a 0-byte .tmp stayed
        assert PodKey("a", "eth0") not in journal


def test_a_settled_entry_a_read_only_disk_keeps_is_not_settled_twice(tmp_path: Path) -> None:
    key = PodKey("a", "eth0")
    with tmpfs(tmp_path / "state", "1m") as state:
        journal = DeleteJournal(state / "pending-deletes")
        journal.add(key, _record("a"))
        with read_only(state):
            journal.remove(key)  # raised OSError (EROFS) before
            assert key not in journal
            journal.rescan()
            assert key not in journal and not journal.has(key)
            assert journal.unremoved() == [key] and journal.health.problem
        journal.retry_remove(key)
        assert journal.unremoved() == [] and list((state / "pending-deletes").iterdir()) == []
        assert journal.health.problem == ""


def test_a_new_entry_of_a_settled_key_is_not_removed_by_the_retry(tmp_path: Path) -> None:
    key = PodKey("a", "eth0")
    with tmpfs(tmp_path / "state", "1m") as state:
        journal = DeleteJournal(state / "pending-deletes")
        journal.add(key, _record("a"))
        with read_only(state):
            journal.remove(key)
        from cni_client.journal import journal_delete  # the plugin journals the key anew

        journal_delete(str(state), "a", "eth0", "/run/netns/y")
        journal.retry_remove(key)
        assert journal.has(key)
        entry = journal.get(key)
        assert entry is not None and entry.netns == "/run/netns/y"


def test_temp_files_left_behind_are_swept(tmp_path: Path) -> None:
    directory = tmp_path / "pending-deletes"
    DeleteJournal(directory).add(PodKey("a", "eth0"), _record("a"))
    own = directory / "0123456789abcdef0123456789abcdef.tmp"  # a killed agent's
    old = directory / "fedcba9876543210fedcba9876543210.json.4242.tmp"  # a failed plugin's
    young = directory / "00112233445566778899aabbccddeeff.json.4343.tmp"  # a plugin writing now
    for path in (own, old, young):
        path.write_text("")
    long_ago = time.time() - 3600
    os.utime(old, (long_ago, long_ago))
    journal = DeleteJournal(directory)
    assert sorted(p.name for p in directory.glob("*.tmp")) == [young.name]
    os.utime(young, (long_ago, long_ago))
    journal.rescan()
    assert list(directory.glob("*.tmp")) == []
    assert [p.key for p in journal.pending()] == [PodKey("a", "eth0")]

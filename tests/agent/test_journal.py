"""The DEL journal on disk: what one agent wrote, the next one reads; a damaged entry is set
aside (and logged) instead of stopping the agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.journal import DeleteJournal
from agent.model import PodKey, PodRecord


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

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
    assert dict(second.pending()) == {PodKey("a", "eth0"): _record("a"), PodKey("b", "net1"): None}
    second.remove(PodKey("a", "eth0"))
    second.remove(PodKey("a", "eth0"))  # idempotent
    assert PodKey("a", "eth0") not in DeleteJournal(tmp_path / "j")
    assert len(DeleteJournal(tmp_path / "j")) == 1


def test_a_damaged_entry_is_set_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    journal = DeleteJournal(tmp_path / "j")
    journal.add(PodKey("a", "eth0"), _record("a"))
    (tmp_path / "j" / "broken.json").write_text("{not json")
    again = DeleteJournal(tmp_path / "j")
    assert [k for k, _ in again.pending()] == [PodKey("a", "eth0")]
    assert (tmp_path / "j" / "broken.corrupt").exists()
    assert "unreadable" in caplog.text

"""The node's own copy of its pod records: in memory, and mirrored on the node's disk.

etcd stays the truth for every decision; this agent is the only writer of its node's records, so
it can keep a copy of them. The copy finds a pod's older sandbox without listing etcd on every
ADD, lets a DEL tear a pod down while etcd is unreachable (agent/state/journal keeps the release),
and gives the records back when etcd lost them (wiped, restored from an old backup): a live pod is
never unwired because etcd forgot it (agent/state/id_guard while the agent runs,
agent/lifecycle/reconcile at start).

The mirror is one JSON file per ready attachment, `<StateDir>/pods/<sha256(key)[:32]>.json`,
written whole (temp file, rename) when the record is ready or rewired and removed with it. It
is not fsync'd: a node that loses power loses its pods too, and with them the need for a copy.

The mirror is a cache: a disk that is read-only or full never fails a request. A copy that
cannot be written, or cannot be removed (a DEL on a read-only disk), is noted as out of date
and put right by `retry` (the DEL drainer calls it every second) or by the next start's `load`,
whichever comes first. Until then a stale copy is only a file: the records in memory, which
every decision reads, no longer hold it. The trouble is logged once and shown by /metrics
(agent/state/statedir.DiskHealth).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path

from agent.model.pod import PodKey, PodRecord
from agent.state.statedir import DiskHealth, sweep_temp_files, write_whole

log = logging.getLogger(__name__)


class KnownRecords:
    """Ready records by key; with a directory, every change is mirrored there."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.health = DiskHealth("pods", self.directory or Path("."),
                                 "pods are served without their copies on the node")
        self._lock = threading.Lock()
        self._records: dict[PodKey, PodRecord] = {}
        self._behind: set[PodKey] = set()  # copies that differ from _records: write or remove
        if self.directory is not None:
            try:
                self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError as exc:
                self.health.failed(f"create {self.directory}", exc)
            # Only the agent writes here, and only one agent runs (agent/app/agent refuses a
            # second): every temp file is a leftover of a killed agent.
            sweep_temp_files(self.directory, lambda path, age: True)

    def load(self, records: Iterable[PodRecord]) -> None:
        """Replaces the copy (reconcile, with the surviving records); the mirror follows."""
        kept = {r.key: r for r in records}
        with self._lock:
            self._records = dict(kept)
            self._behind.clear()
        for record in kept.values():
            self._write(record, unless_same=True)
        for key in {r.key for r in self.on_disk()} - set(kept):
            self._unlink(key)

    def remember(self, record: PodRecord) -> None:
        with self._lock:
            self._records[record.key] = record
        self._write(record)

    def forget(self, key: PodKey) -> None:
        """Drops `key`; never raises (a copy that cannot be removed now is removed later)."""
        with self._lock:
            self._records.pop(key, None)
        self._unlink(key)

    def behind(self) -> list[PodKey]:
        """The keys whose copy could not be written or removed yet."""
        with self._lock:
            return list(self._behind)

    def retry(self, key: PodKey) -> None:
        """Writes or removes `key`'s copy again if it is out of date (the caller holds the
        key's request lock, so no ADD or DEL of the key changes it meanwhile)."""
        with self._lock:
            if key not in self._behind:
                return
            record = self._records.get(key)
        if record is None:
            self._unlink(key)
        else:
            self._write(record)

    def get(self, key: PodKey) -> PodRecord | None:
        with self._lock:
            return self._records.get(key)

    def all(self) -> list[PodRecord]:
        with self._lock:
            return list(self._records.values())

    def on_disk(self) -> list[PodRecord]:
        """The mirrored records (what the previous agent knew); unreadable files are skipped."""
        if self.directory is None:
            return []
        found: list[PodRecord] = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                found.append(PodRecord.from_json_dict(json.loads(path.read_text())))
            except (OSError, ValueError, TypeError, AttributeError) as exc:
                log.warning("pod record copy %s is unreadable (%s); ignored", path, exc)
        return found

    def _path(self, key: PodKey) -> Path:
        assert self.directory is not None
        return self.directory / f"{key.digest(32)}.json"

    def _write(self, record: PodRecord, unless_same: bool = False) -> None:
        """Mirrors `record`; with `unless_same`, a copy already holding exactly this text is
        left alone (after a restart nearly every copy is current: reading is far cheaper than
        writing and renaming one file per live pod)."""
        if self.directory is None:
            return
        path = self._path(record.key)
        tmp = path.with_suffix(f".{threading.get_ident()}.tmp")
        text = json.dumps(record.to_json_dict())
        try:
            if unless_same and _text_of(path) == text:
                return
            write_whole(path, text.encode(), tmp)
        except OSError as exc:  # the copy is a cache: the request goes on without it
            self._note(record.key, behind=True)
            self.health.failed(f"write the copy of {record.key}", exc)
            return
        self._note(record.key, behind=False)
        self.health.succeeded()

    def _unlink(self, key: PodKey) -> None:
        if self.directory is None:
            return
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:  # no copy (never written, or removed): nothing was tried
            self._note(key, behind=False)
            return
        except OSError as exc:
            self._note(key, behind=True)
            self.health.failed(f"remove the copy of {key}", exc)
            return
        self._note(key, behind=False)
        self.health.succeeded()

    def _note(self, key: PodKey, behind: bool) -> None:
        with self._lock:
            if behind:
                self._behind.add(key)
            else:
                self._behind.discard(key)


def _text_of(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, ValueError):  # missing or unreadable (UnicodeDecodeError): write it anew
        return None

"""The DEL journal: releases that the agent could not settle with etcd yet, kept on the node.

Two writers, one format (`<StateDir>/pending-deletes/<sha256(container_id NUL ifname)[:32]>.json`):
- the agent, when a DEL finds etcd unreachable: it still tears the attachment's dataplane down
  and answers success, and journals the release (`detached: true`, with the record it knew);
- the plugin, when a DEL cannot reach the agent at all (agent down or restarting): it journals
  the attachment (`detached: false`, with the netns) and answers success, so the pod does not
  stick in Terminating; the agent tears the dataplane down when it settles the entry.

Each entry is written whole (temp file, fsync, rename) before DEL answers. The agent settles
entries at start (reconcile) and from a background drainer once etcd answers: dataplane first
where still needed, then the record and its allocation keys, then the addresses go back to the
pools. Until then the addresses stay reserved: nothing is handed out twice, nothing is lost.

A disk that is full or read-only: an entry that cannot be written is `JournalUnwritable` (CNI
code 11: the DEL is retried, its addresses stay reserved) and leaves no temp file; an entry
settled but not removable is remembered as settled (with the file's identity), so neither a
rescan nor `has` brings it back (settling it twice would release its addresses twice), and its
removal is tried again (`retry_remove`). Temp files a killed writer left are swept at start and,
for the plugin's, at every rescan once they are older than any write takes.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from agent.model.errors import TryAgainLater
from agent.model.pod import PodKey, PodRecord
from agent.state.statedir import DiskHealth, describe, fsync_dir, sweep_temp_files, write_whole

log = logging.getLogger(__name__)

# A plugin's temp file younger than this may be a write in progress (the plugin writes and
# renames it within milliseconds): older ones are leftovers of a plugin that failed or was killed.
TEMP_GRACE = 60.0


class JournalUnwritable(TryAgainLater):
    """An entry could not be written (the StateDir is full or read-only): the DEL must fail
    and be retried, as nothing else would remember the release."""


@dataclass(frozen=True)
class Pending:
    """One journaled DEL."""

    key: PodKey
    record: PodRecord | None  # what the agent knew, if it wrote the entry
    detached: bool  # the dataplane is already torn down
    netns: str = ""


class DeleteJournal:
    """Pending releases, one JSON file per attachment under `directory`."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.health = DiskHealth("pending-deletes", self.directory,
                                 "DELs that find etcd unreachable fail with code 11 (retried)")
        self._lock = threading.Lock()
        self._pending: dict[PodKey, Pending] = {}
        # Settled entries whose file could not be removed, with that file's identity.
        self._settled: dict[PodKey, tuple[int, int]] = {}
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            self.health.failed(f"create {self.directory}", exc)
        # At start no agent writes (agent/app/agent refuses a second one): the agent's own temp
        # files (`<digest>.tmp`) are leftovers; the plugin's (`<digest>.json.<pid>.tmp`) once old.
        sweep_temp_files(self.directory, lambda path, age: "." not in path.stem
                         or age > TEMP_GRACE)
        self.rescan()

    def rescan(self) -> None:
        """Reads entries written by others (the plugin) since the last look."""
        sweep_temp_files(self.directory, lambda path, age: age > TEMP_GRACE)
        for path in sorted(self.directory.glob("*.json")):
            if self._is_settled(path):
                continue
            try:
                entry = _read(path)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                # Entries are written whole (rename after fsync); this one was edited by hand.
                log.error("DEL journal entry %s is unreadable (%s); moved aside", path, exc)
                try:
                    os.replace(path, path.with_suffix(".corrupt"))
                except OSError as move:
                    self.health.failed(f"move {path.name} aside", move)
                continue
            with self._lock:
                self._pending.setdefault(entry.key, entry)

    def has(self, key: PodKey) -> bool:
        """Whether `key` has a pending entry, looking at the disk too: the plugin may have
        journaled a DEL since the last rescan (a request must not miss that DEL)."""
        with self._lock:
            if key in self._pending:
                return True
        path = self._path(key)
        if not path.exists() or self._is_settled(path):
            return False
        try:
            entry = _read(path)
        except (OSError, ValueError, KeyError, TypeError):
            self.rescan()  # sets a damaged entry aside, logged, as at any rescan
            return key in self
        with self._lock:
            self._pending.setdefault(entry.key, entry)
        return entry.key == key

    def _path(self, key: PodKey) -> Path:
        return self.directory / f"{key.digest(32)}.json"

    def add(self, key: PodKey, record: PodRecord | None) -> None:
        """Durably notes that `key`'s (already detached) record and addresses must be released.

        Without a record, the one a pending entry of `key` knew is kept (the addresses it
        lists are released when etcd no longer has the record). Raises JournalUnwritable when
        the entry cannot be made durable; nothing is left on disk then."""
        if record is None:
            earlier = self.get(key)
            record = earlier.record if earlier is not None else None
        netns = record.netns if record else ""
        data = {
            "container_id": key.container_id,
            "ifname": key.ifname,
            "netns": netns,
            "detached": True,
            "record": record.to_json_dict() if record else None,
        }
        path = self._path(key)
        try:
            write_whole(path, json.dumps(data).encode(), path.with_suffix(".tmp"), durable=True)
        except OSError as exc:
            self.health.failed(f"journal the DEL of {key}", exc)
            raise JournalUnwritable(f"the DEL journal in {self.directory} cannot be written",
                                    describe(exc)) from exc
        self.health.succeeded()
        with self._lock:
            self._pending[key] = Pending(key, record, True, netns)
            self._settled.pop(key, None)  # a new entry replaced the settled one's file

    def remove(self, key: PodKey) -> None:
        """Drops a settled entry. Never raises: a file that cannot be removed now is
        remembered as settled and removed by `retry_remove`."""
        with self._lock:
            self._pending.pop(key, None)
        self._unlink(key)

    def unremoved(self) -> list[PodKey]:
        """Settled entries whose file is still on disk."""
        with self._lock:
            return list(self._settled)

    def retry_remove(self, key: PodKey) -> None:
        """Tries again to remove a settled entry's file (the caller holds the key's request
        lock: no DEL of the same key writes a new entry meanwhile)."""
        with self._lock:
            identity = self._settled.get(key)
        if identity is None:
            return
        if _identity(self._path(key)) != identity:  # gone, or a new entry: not ours to remove
            with self._lock:
                self._settled.pop(key, None)
            return
        self._unlink(key)

    def _unlink(self, key: PodKey) -> None:
        path = self._path(key)
        try:
            os.unlink(path)
        except FileNotFoundError:
            with self._lock:
                self._settled.pop(key, None)
            return
        except OSError as exc:
            identity = _identity(path)
            with self._lock:
                if identity is not None:
                    self._settled[key] = identity
            self.health.failed(f"remove the settled entry of {key}", exc)
            return
        with self._lock:
            self._settled.pop(key, None)
        try:
            fsync_dir(self.directory)
        except OSError as exc:
            self.health.failed("sync the journal directory", exc)
            return
        self.health.succeeded()

    def _is_settled(self, path: Path) -> bool:
        """Whether `path` is the file of an entry settled already (not removable then)."""
        with self._lock:
            identities = set(self._settled.values())
        return bool(identities) and _identity(path) in identities

    def get(self, key: PodKey) -> Pending | None:
        with self._lock:
            return self._pending.get(key)

    def pending(self) -> list[Pending]:
        with self._lock:
            return list(self._pending.values())

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._pending

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)


def _read(path: Path) -> Pending:
    data = json.loads(path.read_text())
    key = PodKey(str(data["container_id"]), str(data["ifname"]))
    raw = data.get("record")
    record = PodRecord.from_json_dict(raw) if isinstance(raw, dict) else None
    return Pending(key, record, bool(data.get("detached", True)), str(data.get("netns", "")))


def _identity(path: Path) -> tuple[int, int] | None:
    """(inode, mtime in ns) of `path`: a rename over it gives another; None when missing."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns)

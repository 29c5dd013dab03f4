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
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from agent.model import PodKey, PodRecord

log = logging.getLogger(__name__)


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
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = threading.Lock()
        self._pending: dict[PodKey, Pending] = {}
        self.rescan()

    def rescan(self) -> None:
        """Reads entries written by others (the plugin) since the last look."""
        for path in sorted(self.directory.glob("*.json")):
            try:
                entry = _read(path)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                # Entries are written whole (rename after fsync); this one was edited by hand.
                log.error("DEL journal entry %s is unreadable (%s); moved aside", path, exc)
                os.replace(path, path.with_suffix(".corrupt"))
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
        if not path.exists():
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
        lists are released when etcd no longer has the record)."""
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
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(self.directory)
        with self._lock:
            self._pending[key] = Pending(key, record, True, netns)

    def remove(self, key: PodKey) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(key))
        _fsync_dir(self.directory)
        with self._lock:
            self._pending.pop(key, None)

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


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

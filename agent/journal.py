"""The DEL journal: releases that etcd could not take yet, kept on the node's disk.

A DEL that finds etcd unreachable still tears the attachment's dataplane down and answers
success (the runtime must not retry forever, and the pod must stop being reachable), but the
record and its allocation keys cannot be deleted. The attachment goes into this journal instead,
one small file per attachment, written and fsync'd before DEL answers; the agent deletes the
record from etcd and returns the addresses to its pools once etcd answers again (a background
drainer, and reconcile at start). Until then the addresses stay reserved: nothing is handed out
twice, nothing is lost.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from pathlib import Path

from agent.model import PodKey, PodRecord

log = logging.getLogger(__name__)


class DeleteJournal:
    """Pending releases, one JSON file per attachment under `directory`."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = threading.Lock()
        self._pending: dict[PodKey, PodRecord | None] = {}
        for path in sorted(self.directory.glob("*.json")):
            try:
                key, record = _read(path)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                # Entries are written whole (rename after fsync); this one was edited by hand.
                log.error("DEL journal entry %s is unreadable (%s); moved aside", path, exc)
                os.replace(path, path.with_suffix(".corrupt"))
                continue
            self._pending[key] = record

    def _path(self, key: PodKey) -> Path:
        return self.directory / f"{key.digest(32)}.json"

    def add(self, key: PodKey, record: PodRecord | None) -> None:
        """Durably notes that `key`'s record and addresses must be released."""
        data = {
            "container_id": key.container_id,
            "ifname": key.ifname,
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
            self._pending[key] = record

    def remove(self, key: PodKey) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(key))
        _fsync_dir(self.directory)
        with self._lock:
            self._pending.pop(key, None)

    def pending(self) -> list[tuple[PodKey, PodRecord | None]]:
        with self._lock:
            return list(self._pending.items())

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._pending

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)


def _read(path: Path) -> tuple[PodKey, PodRecord | None]:
    data = json.loads(path.read_text())
    key = PodKey(str(data["container_id"]), str(data["ifname"]))
    raw = data.get("record")
    return key, PodRecord.from_json_dict(raw) if isinstance(raw, dict) else None


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

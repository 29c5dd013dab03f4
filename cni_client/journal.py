"""The plugin's half of the DEL journal (agent/state/journal.py is the other half and the format's
home): a DEL that cannot reach the agent is written to the node's state directory, whole and
fsync'd, and the agent tears the attachment down and releases it when it settles the entry."""

from __future__ import annotations

import os

from cni_client import jsonfast

PENDING = "pending-deletes"


def entry_name(container_id: str, ifname: str) -> str:
    """The file name the agent uses for the same attachment (PodKey.digest(32))."""
    import hashlib  # 3.4 ms of import: only on the journaling path

    digest = hashlib.sha256(f"{container_id}\0{ifname}".encode()).hexdigest()[:32]
    return f"{digest}.json"


def journal_delete(state_dir: str, container_id: str, ifname: str, netns: str) -> str:
    """Writes the entry; returns its path. Raises OSError when it cannot be made durable."""
    directory = os.path.join(state_dir, PENDING)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, entry_name(container_id, ifname))
    data = {"container_id": container_id, "ifname": ifname, "netns": netns,
            "detached": False, "record": None}
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(jsonfast.dumps(data))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path

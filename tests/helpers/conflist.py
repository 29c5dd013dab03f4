"""The network config the project ships (k8s/base/configmap.yaml's `10-vswitch.conflist`, also
shown in the README): the one conflist the installer, the runtime tests and the docs all use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG_MAP = ROOT / "k8s" / "base" / "configmap.yaml"
NAME = "10-vswitch.conflist"


def shipped_text() -> str:
    doc = next(d for d in yaml.safe_load_all(CONFIG_MAP.read_text()) if d["kind"] == "ConfigMap")
    text: str = doc["data"][NAME]
    return text


def shipped() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(shipped_text())
    return data


def for_agent(directory: Path, socket: Path, state_dir: str) -> Path:
    """The shipped conflist, pointed at a test agent's socket and state dir (the two keys an
    operator repeats when the agent's CNISocket/StateDir are not the defaults), in `directory`."""
    data = shipped()
    ours = data["plugins"][0]
    assert ours["type"] == "vswitch-cni"
    ours["agentSocket"] = str(socket)
    ours["stateDir"] = state_dir
    path = directory / NAME
    path.write_text(json.dumps(data, indent=2))
    return path

"""The real kustomize, as `kubectl apply -k DIR` runs it: what the tests render k8s/ with.

`make setup` (.ci/install-system) unpacks Debian sid's standalone `kustomize` into .cache/sid;
Debian 12 has no kustomize of its own (its kubectl is too old). A missing binary is a broken
set-up, not a reason to skip: it fails, and says to run `make setup`. A kubectl found on PATH is
never used: a user's machine need not have one.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
BINARY = ROOT / ".cache" / "sid" / "usr" / "bin" / "kustomize"


class KustomizeError(AssertionError):
    """kustomize is missing, or refused a kustomization (its own message is in this one)."""


def binary() -> Path:
    if not BINARY.is_file():
        raise KustomizeError(f"{BINARY} is missing: run `make setup`, which unpacks Debian's "
                             "kustomize there (.ci/install-system)")
    return BINARY


def build(directory: Path) -> str:
    """`kustomize build DIRECTORY`: the YAML stream `kubectl apply -k DIRECTORY` would send."""
    out = subprocess.run([str(binary()), "build", str(directory)], capture_output=True,
                         text=True, timeout=120, check=False)
    if out.returncode != 0:
        raise KustomizeError(f"kustomize build {directory}: {out.stderr.strip()}")
    return out.stdout


def render(directory: Path) -> list[dict[str, Any]]:
    """The documents of `build(directory)`."""
    return [d for d in yaml.safe_load_all(build(directory)) if d]

"""A small kustomize renderer for the subset k8s/ uses, so tests need no kubectl or kustomize.

Supported kustomization keys: `apiVersion`, `kind`, `resources` (YAML files, or directories
holding a kustomization.yaml: rendered recursively) and `patches` with a `path` (strategic merge
patches whose target is the resource of the same kind, name and namespace). Any other key is
refused, so a kustomization that grows beyond this subset fails here instead of rendering
wrongly. The merge follows Kubernetes' strategic merge for the fields used: mappings merge, a
null value deletes the key, lists of containers, init containers, volumes, env and image pull
secrets merge by `name`, volume mounts by `mountPath`, ports by `containerPort`; other lists are
replaced.

    python -m tests.helpers.kustomize k8s/vpp    # prints the rendered documents
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

KNOWN_KEYS = {"apiVersion", "kind", "resources", "patches"}
MERGE_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name", "env": "name",
              "imagePullSecrets": "name", "volumeMounts": "mountPath", "ports": "containerPort"}


class KustomizeError(Exception):
    """A kustomization this renderer cannot render; the message names the file and the key."""


def render(directory: Path) -> list[dict[str, Any]]:
    """The documents `kubectl kustomize directory` would give for the supported subset."""
    path = directory / "kustomization.yaml"
    spec = yaml.safe_load(path.read_text()) or {}
    unknown = set(spec) - KNOWN_KEYS
    if unknown:
        raise KustomizeError(f"{path}: unsupported keys {sorted(unknown)}")
    docs: list[dict[str, Any]] = []
    for entry in spec.get("resources", []):
        target = (directory / entry).resolve()
        if target.is_dir():
            docs += render(target)
        else:
            docs += [d for d in yaml.safe_load_all(target.read_text()) if d]
    for patch in spec.get("patches", []):
        if set(patch) != {"path"}:
            raise KustomizeError(f"{path}: only patches with a path are supported: {patch}")
        for doc in yaml.safe_load_all((directory / patch["path"]).read_text()):
            if doc:
                _apply(docs, doc, f"{path}: patch {patch['path']}")
    return docs


def _identity(doc: dict[str, Any]) -> tuple[str, str, str]:
    meta = doc.get("metadata", {})
    return doc["kind"], meta.get("name", ""), meta.get("namespace", "")


def _apply(docs: list[dict[str, Any]], patch: dict[str, Any], where: str) -> None:
    for i, doc in enumerate(docs):
        if _identity(doc) == _identity(patch):
            docs[i] = merge(doc, patch)
            return
    raise KustomizeError(f"{where}: no resource {_identity(patch)} to patch")


def merge(base: Any, patch: Any, field: str = "") -> Any:
    """Strategic merge of `patch` into `base` (neither is changed)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = merge(out[key], value, key)
            else:
                out[key] = value
        return out
    key = MERGE_KEYS.get(field)
    if key and isinstance(base, list) and isinstance(patch, list):
        merged = list(base)
        for item in patch:
            at = next((i for i, b in enumerate(merged) if b.get(key) == item.get(key)), None)
            if at is None:
                merged.append(item)
            else:
                merged[at] = merge(merged[at], item)
        return merged
    return patch


def main(argv: list[str]) -> int:
    for directory in argv or ["k8s"]:
        sys.stdout.write(yaml.safe_dump_all(render(Path(directory)), sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

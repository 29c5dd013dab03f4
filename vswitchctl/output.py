"""Renders a View: an aligned table for people (default), or the document as JSON or YAML."""

from __future__ import annotations

import json

import yaml

from vswitchctl.views import View

FORMATS = ("table", "json", "yaml")


def render(view: View, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(view.document, indent=2, sort_keys=True, default=str) + "\n"
    if fmt == "yaml":
        return str(yaml.safe_dump(view.document, sort_keys=True, default_flow_style=False))
    return table(view.columns, view.rows)


def table(columns: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart; the last column unpadded."""
    if not rows:
        return "No resources found.\n"
    widths = [max(len(r[i]) for r in [columns, *rows]) for i in range(len(columns))]
    lines = []
    for row in [columns, *rows]:
        cells = [cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines) + "\n"

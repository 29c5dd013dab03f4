"""The agent's logging: text (default) or JSON lines, with the request's fields on every record.

    --log-format text   2026-11-23 19:00:00,123 INFO agent.pods: message [container=... verb=ADD]
    --log-format json   {"time": "2026-11-23T19:00:00.123Z", "level": "INFO", "logger": "...",
                         "message": "...", "container_id": "...", "ifname": "eth0",
                         "pod": "default/web", "verb": "ADD", "phase": "wire"}

The request fields come from a context variable that the gRPC handler (verb, container ID,
ifname, pod) and ADD's steps (phase) set for the duration of their work: every log call under
them carries the fields without passing them along. A call's own `extra={...}` wins. The plugin's
log file (cni_client/log.py) writes the same field names.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
import time
from collections.abc import Iterator

FIELDS = ("container_id", "ifname", "pod", "verb", "phase")
FORMATS = ("text", "json")

# Immutable (pairs), so the default can be shared and a reset restores exactly what was there.
_context: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar(
    "vswitch_log", default=())


@contextlib.contextmanager
def bound(**fields: str) -> Iterator[None]:
    """Adds `fields` to every record logged inside the block (in this thread or task)."""
    merged = {**dict(_context.get()), **{k: v for k, v in fields.items() if v}}
    token = _context.set(tuple(merged.items()))
    try:
        yield
    finally:
        _context.reset(token)


def pod_from_args(cni_args: str) -> str:
    """'namespace/name' from CNI_ARGS (K8S_POD_NAMESPACE, K8S_POD_NAME), "" when absent."""
    pairs = dict(p.split("=", 1) for p in cni_args.split(";") if "=" in p)
    namespace, name = pairs.get("K8S_POD_NAMESPACE", ""), pairs.get("K8S_POD_NAME", "")
    return f"{namespace}/{name}" if name else ""


class _ContextFilter(logging.Filter):
    """Copies the bound fields onto each record (a handler filter: records of every logger)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _context.get():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ms), level, logger, message, the request fields."""

    def format(self, record: logging.LogRecord) -> str:
        seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        out: dict[str, object] = {
            "time": f"{seconds}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in FIELDS:
            value = getattr(record, key, None)
            if value:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """The classic line, with the request fields in brackets at the end when there are any."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = [f"{k}={getattr(record, k)}" for k in FIELDS if getattr(record, k, None)]
        if not fields:
            return line
        head, sep, tail = line.partition("\n")  # a traceback stays below the fields
        return f"{head} [{' '.join(fields)}]{sep}{tail}"


def setup(level: str, fmt: str = "text") -> None:
    """Configures the root logger: stderr, `level`, the chosen format, the context fields."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(_ContextFilter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)

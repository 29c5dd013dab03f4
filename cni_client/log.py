"""A tiny logger for the plugin: the config's logFile (if any) plus stderr for warnings.

Not the stdlib logging package: it costs a few ms of import per exec and we need three lines of it.
Logging must never make a CNI call fail, so write errors are swallowed (and noted on stderr).

`logFormat: json` writes one JSON object per line with the agent's field names
(agent/infra/logs.py):
time, level, logger ("vswitch-cni"), message, verb, container_id, ifname, pod, plus pid; `text`
(the default) keeps `<time>Z pid=N LEVEL VERB ID/IFNAME: message`.
"""

from __future__ import annotations

import os
import sys
import time

from cni_client import jsonfast

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


class Log:
    def __init__(self, path: str | None, level: str = "info", prefix: str = "",
                 fmt: str = "text", fields: dict[str, str] | None = None) -> None:
        self.path = path
        self.threshold = _LEVELS.get(level, 20)
        self.prefix = prefix  # verb and container ID: what an operator greps for
        self.json = fmt == "json"
        self.fields = {k: v for k, v in (fields or {}).items() if v}

    def write(self, level: str, msg: str) -> None:
        rank = _LEVELS[level]
        line = f"{level.upper()} {self.prefix}: {msg}" if self.prefix else f"{level.upper()} {msg}"
        if rank >= _LEVELS["warning"]:
            sys.stderr.write(f"vswitch-cni: {line}\n")
        if self.path is None or rank < self.threshold:
            return
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
        if self.json:
            entry = {"time": f"{stamp}.{int(now * 1000) % 1000:03d}Z", "level": level.upper(),
                     "logger": "vswitch-cni", "message": msg, **self.fields,
                     "pid": os.getpid()}
            text = jsonfast.dumps(entry, ensure_ascii=False) + "\n"
        else:
            text = f"{stamp}Z pid={os.getpid()} {line}\n"
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            try:  # one write() per line: concurrent plugin processes do not interleave
                os.write(fd, text.encode())
            finally:
                os.close(fd)
        except OSError as exc:
            sys.stderr.write(f"vswitch-cni: cannot write log file {self.path}: {exc}\n")

    def debug(self, msg: str) -> None:
        self.write("debug", msg)

    def info(self, msg: str) -> None:
        self.write("info", msg)

    def warning(self, msg: str) -> None:
        self.write("warning", msg)

    def error(self, msg: str) -> None:
        self.write("error", msg)

"""Live TCP traffic to a pod's HTTP server, counted: what a rolling update of the agent must not
break.

The same file is the program that runs inside a pod's network namespace (`python3 flows.py HOST
PORT LONG` through nsenter; stdlib only, no package imports):
- LONG established connections (HTTP/1.1 keep-alive), each sending `GET /hostname` every
  INTERVAL seconds for the whole run: a connection is `kept` when every request on it was
  answered, `reset` when the peer reset it, `failed` on any other error (a timeout, a close);
- meanwhile new connections, one after another, each `GET /hostname` then close: `attempted`,
  `succeeded`, `reset`, `failed`.
It runs until its stdin closes, then prints the counts as one JSON line. `Flows` is the test side.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any

HERE = __file__
INTERVAL = 0.2
TIMEOUT = 5.0


# --- inside the pod's namespace -------------------------------------------------------------

def _outcome(exc: BaseException) -> str:
    # http.client's RemoteDisconnected (the peer closed) is a ConnectionResetError too.
    if isinstance(exc, ConnectionResetError) and not isinstance(
            exc, http.client.RemoteDisconnected):
        return "reset"
    return "failed"


def _ask(conn: http.client.HTTPConnection) -> None:
    conn.request("GET", "/hostname")
    answer = conn.getresponse()
    answer.read()
    if answer.status != 200:
        raise OSError(f"HTTP {answer.status}")


class _Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.data: dict[str, dict[str, Any]] = {
            "established": {"opened": 0, "kept": 0, "reset": 0, "failed": 0, "requests": 0,
                            "errors": []},
            "new": {"attempted": 0, "succeeded": 0, "reset": 0, "failed": 0, "errors": []},
        }

    def add(self, kind: str, key: str, error: BaseException | None = None) -> None:
        with self.lock:
            self.data[kind][key] += 1
            if error is not None and len(self.data[kind]["errors"]) < 5:
                self.data[kind]["errors"].append(f"{type(error).__name__}: {error}")


def _established(host: str, port: int, counts: _Counts, stop: threading.Event) -> None:
    conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT)
    try:
        _ask(conn)
    except OSError as exc:  # could not even start: counted apart from losses
        counts.add("established", "failed", exc)
        return
    counts.add("established", "opened")
    try:
        while not stop.wait(INTERVAL):
            _ask(conn)
            counts.add("established", "requests")
    except (OSError, http.client.HTTPException) as exc:
        counts.add("established", _outcome(exc), exc)
        return
    finally:
        conn.close()
    counts.add("established", "kept")


def _new(host: str, port: int, counts: _Counts, stop: threading.Event) -> None:
    while not stop.wait(INTERVAL / 4):
        counts.add("new", "attempted")
        conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT)
        try:
            _ask(conn)
            counts.add("new", "succeeded")
        except (OSError, http.client.HTTPException) as exc:
            counts.add("new", _outcome(exc), exc)
        finally:
            conn.close()


def main(argv: list[str]) -> int:
    host, port, long = argv[0], int(argv[1]), int(argv[2])
    counts, stop = _Counts(), threading.Event()
    threads = [threading.Thread(target=_established, args=(host, port, counts, stop))
               for _ in range(long)]
    threads.append(threading.Thread(target=_new, args=(host, port, counts, stop)))
    for t in threads:
        t.start()
    print("started", flush=True)
    sys.stdin.read()  # until the test closes it
    stop.set()
    for t in threads:
        t.join()
    print(json.dumps(counts.data), flush=True)
    return 0


# --- the test side --------------------------------------------------------------------------

@dataclass
class Flows:
    """The program above in the network namespace `netns`, towards HOST:PORT."""

    netns: str
    host: str
    port: int
    long: int = 8

    def __enter__(self) -> Flows:
        self.proc = subprocess.Popen(
            ["nsenter", f"--net={self.netns}", sys.executable, HERE, self.host, str(self.port),
             str(self.long)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "started":
            self.proc.kill()
            raise RuntimeError(f"flows in {self.netns} did not start: {self.proc.communicate()}")
        return self

    def stop(self) -> dict[str, dict[str, Any]]:
        """Ends the run; the counts."""
        out, err = self.proc.communicate(timeout=2 * TIMEOUT + 10)
        if self.proc.returncode != 0:
            raise RuntimeError(f"flows in {self.netns} failed: {err.strip()}")
        counts: dict[str, dict[str, Any]] = json.loads(out)
        return counts

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

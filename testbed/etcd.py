"""Real etcd servers for tests: `/usr/bin/etcd` on 127.0.0.1, free ports, temp data dirs.

- `EtcdServer()`: one member. `EtcdCluster(n)`: n members forming one cluster.
- Both are context managers; leaving the block (also by an exception) kills every member and
  removes the data dirs. `.endpoints` lists the client URLs.
- Fault injection: `.stop()` / `.start()` (a cluster takes a member index) keep ports and data, so
  a restarted member is the same member; `.freeze()` / `.thaw()` SIGSTOP / SIGCONT the members:
  requests then wait in their sockets and are answered, late, once thawed; `.wipe()` restarts
  every member on the same ports with an empty data dir (etcd lost, or restored from nothing).

- TLS: `EtcdServer(tls=ServerTLS(cert, key, client_ca))` serves https:// with that certificate
  and demands client certificates signed by `client_ca` (`--client-cert-auth`); its health is
  probed on a plain-http metrics port (`--listen-metrics-urls`), so the probe needs no certificate.
  Replacing the files and `.stop()` / `.start()` rotates them. Certificates: testbed/pki.py.

Fast elections (`--heartbeat-interval 10 --election-timeout 100`) make a member healthy in ~0.1 s.
`extra` adds flags of the caller's (a Kubernetes API server's test etcd sends watch progress
notifications every second: `--experimental-watch-progress-notify-interval=1s`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

ETCD = "/usr/bin/etcd"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class ServerTLS:
    """A TLS etcd's files: its server certificate and key, and the CA of its clients."""

    cert: Path
    key: Path
    client_ca: Path


class _Member:
    def __init__(self, name: str, root: str, tls: ServerTLS | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        self.name = name
        self.tls = tls
        self.extra = extra
        self.client_port = free_port()
        self.peer_port = free_port()
        self.metrics_port = free_port() if tls else 0
        self.data_dir = os.path.join(root, name)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(root, f"{name}.log")

    @property
    def client_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.client_port}"

    @property
    def health_url(self) -> str:
        if self.tls:
            return f"http://127.0.0.1:{self.metrics_port}/health"
        return f"{self.client_url}/health"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def start(self, initial_cluster: str, token: str) -> None:
        if self.proc is not None:
            return
        argv = [
            ETCD, "--name", self.name, "--data-dir", self.data_dir,
            "--listen-client-urls", self.client_url, "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", initial_cluster, "--initial-cluster-token", token,
            "--initial-cluster-state", "new",
            "--heartbeat-interval", "10", "--election-timeout", "100",
            "--log-level", "error", *self.extra,
        ]
        if self.tls:
            argv += [
                "--cert-file", str(self.tls.cert), "--key-file", str(self.tls.key),
                "--client-cert-auth", "--trusted-ca-file", str(self.tls.client_ca),
                "--listen-metrics-urls", f"http://127.0.0.1:{self.metrics_port}",
            ]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGKILL)  # a crash, not a clean shutdown
        self.proc.wait(timeout=10)
        self.proc = None

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.health_url, timeout=0.5) as resp:
                return b'"true"' in resp.read()
        except OSError:
            return False


class EtcdCluster:
    """n etcd members on loopback; a context manager that always cleans up."""

    def __init__(self, n: int = 3, tls: ServerTLS | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        self._root = tempfile.mkdtemp(prefix=f"etcd-{os.getpid()}-")
        self._token = os.path.basename(self._root)
        self.members = [_Member(f"m{i}", self._root, tls, extra) for i in range(n)]
        self._initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    @property
    def endpoints(self) -> list[str]:
        return [m.client_url for m in self.members]

    def start(self, index: int | None = None, wait: float = 20.0) -> None:
        """Starts one member (or all) and waits until it (they) report healthy."""
        chosen = self.members if index is None else [self.members[index]]
        for member in chosen:
            member.start(self._initial, self._token)
        deadline = time.monotonic() + wait
        while not all(m.healthy() for m in chosen):
            for member in chosen:
                if member.proc is not None and member.proc.poll() is not None:
                    raise RuntimeError(f"etcd {member.name} exited: {self._log(member)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd not healthy after {wait}s: {self._log(chosen[0])}")
            time.sleep(0.05)

    def stop(self, index: int | None = None) -> None:
        for member in self.members if index is None else [self.members[index]]:
            member.stop()

    def freeze(self) -> None:
        for member in self.members:
            if member.proc is not None:
                member.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        for member in self.members:
            if member.proc is not None:
                member.proc.send_signal(signal.SIGCONT)

    def wipe(self, wait: float = 20.0) -> None:
        self.stop()
        for member in self.members:
            shutil.rmtree(member.data_dir, ignore_errors=True)
        self._token = f"{os.path.basename(self._root)}-{time.monotonic_ns()}"
        self.start(wait=wait)

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self._root, ignore_errors=True)

    def _log(self, member: _Member) -> str:
        try:
            with open(member.log_path, encoding="utf-8", errors="replace") as log:
                return log.read()[-2000:]
        except OSError:
            return "(no log)"

    def logs(self) -> str:
        """The end of every member's log (they go with the data dirs at close)."""
        return "\n".join(f"--- etcd {m.name} ---\n{self._log(m)}" for m in self.members)

    def __enter__(self) -> EtcdCluster:
        for attempt in range(3):
            try:
                self.start()
                return self
            except RuntimeError:
                # most likely a port taken between free_port() and etcd's bind: new ports
                self.stop()
                if attempt == 2:
                    self.close()
                    raise
                self._renew()
            except BaseException:
                self.close()
                raise
        raise AssertionError("unreachable")

    def _renew(self) -> None:
        for member in self.members:
            shutil.rmtree(member.data_dir, ignore_errors=True)
        self.members = [_Member(m.name, self._root, m.tls, m.extra) for m in self.members]
        self._initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class EtcdServer(EtcdCluster):
    """A single-member etcd."""

    def __init__(self, tls: ServerTLS | None = None, extra: tuple[str, ...] = ()) -> None:
        super().__init__(1, tls, extra)

    def __enter__(self) -> EtcdServer:
        super().__enter__()
        return self

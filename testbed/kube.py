"""A real Kubernetes API server for tests: the binary the user supplies, on 127.0.0.1.

    with EtcdServer() as etcd, KubeApiServer(BINARY, etcd.endpoints) as api:
        api.request("POST", "/api/v1/namespaces", {...})        # as the admin
        kubeconfig = api.kubeconfig("reflector")                 # a file for a token user

`VSWITCH_TEST_KUBE_APISERVER` names the binary (`binary()` returns it, or None when unset: the
tests skip); it must be a kube-apiserver (v1.28 was used). Nothing of Kubernetes is shipped or
built here.

What it runs: HTTPS on a free port of 127.0.0.1 with a certificate of a throwaway CA
(testbed/pki), a static token file (`admin` in system:masters; every name in `users` a plain
user with no group but system:authenticated, so it may do only what RBAC bindings give it),
authorization mode RBAC, service-account keys made here, the given etcd under a prefix of its
own. The ServiceAccount admission plugin is off: no controller-manager creates the `default`
service accounts pods would otherwise need. `watch_cache=False` makes every watch an etcd watch
(an etcd compaction then expires old revisions at once: 410 Gone).

A context manager: leaving the block (also by an exception) kills the server and removes its
files. `.stop()` / `.start()` keep the port and the files: a restarted server is the same one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from testbed.etcd import free_port
from testbed.pki import Pki

ENV = "VSWITCH_TEST_KUBE_APISERVER"
ADMIN = "admin"


def binary() -> str | None:
    """The kube-apiserver the user gave, or None (the Kubernetes tests skip)."""
    return os.environ.get(ENV) or None


class KubeApiServer:
    """One kube-apiserver on loopback; a context manager that always cleans up."""

    def __init__(self, binary: str, etcd_endpoints: list[str], *,
                 users: tuple[str, ...] = ("reflector",), watch_cache: bool = True,
                 sans: tuple[str, ...] = ()) -> None:
        """`sans`: more names of its serving certificate ("IP:..."), for clients that reach
        it through a relay at another address (a node namespace's agent)."""
        self.binary = binary
        self.etcd_endpoints = etcd_endpoints
        self.watch_cache = watch_cache
        self.root = Path(tempfile.mkdtemp(prefix=f"kube-apiserver-{os.getpid()}-"))
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.root / "apiserver.log"
        pki = Pki(self.root / "pki")
        self.ca = pki.ca("kube-ca")
        self.serving = self.ca.issue("apiserver", server=True, sans=("IP:127.0.0.1", *sans))
        self.sa_keys = pki.key_pair("service-accounts")
        self.tokens = {name: os.urandom(16).hex() for name in (ADMIN, *users)}
        lines = [f'{self.tokens[ADMIN]},{ADMIN},uid-{ADMIN},"system:masters"']
        lines += [f"{self.tokens[u]},{u},uid-{u}" for u in users]
        self.token_file = self.root / "tokens.csv"
        self.token_file.write_text("\n".join(lines) + "\n")
        self.tls = ssl.create_default_context(cafile=str(self.ca.cert))  # trusts this server

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        return [
            self.binary,
            "--bind-address=127.0.0.1", f"--secure-port={self.port}",
            "--advertise-address=127.0.0.1",
            f"--tls-cert-file={self.serving.cert}", f"--tls-private-key-file={self.serving.key}",
            f"--cert-dir={self.root / 'certs'}",
            f"--etcd-servers={','.join(self.etcd_endpoints)}",
            f"--etcd-prefix=/registry-{self.root.name}",
            f"--watch-cache={str(self.watch_cache).lower()}",
            f"--token-auth-file={self.token_file}",
            "--authorization-mode=RBAC", "--anonymous-auth=false",
            f"--service-account-key-file={self.sa_keys.cert}",
            f"--service-account-signing-key-file={self.sa_keys.key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--disable-admission-plugins=ServiceAccount",
            "--enable-priority-and-fairness=false", "--profiling=false",
            "--etcd-compaction-interval=0",  # compaction only when a test asks for it
            "--v=1",
        ]

    def start(self, wait: float = 90.0) -> None:
        """Starts the server and waits until /readyz answers ok (RBAC's bootstrap done)."""
        if self.proc is None:
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + wait
        while not self._ready():
            if self.proc.poll() is not None:
                self.proc = None
                raise RuntimeError(f"kube-apiserver exited: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"kube-apiserver not ready after {wait}s: {self.log_tail()}")
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            status, _ = self.request("GET", "/readyz", timeout=2.0)
        except OSError:
            return False
        return status == 200

    def stop(self) -> None:
        """Kills the server (a crash: open watches break, nothing is said to them)."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc = None

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, size: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError:
            return "(no log)"

    # ---- clients -----------------------------------------------------------------------------

    def kubeconfig(self, user: str, port: int | None = None, host: str = "127.0.0.1") -> Path:
        """A kubeconfig file for token user `user`, to this server or to `port` on `host` (a
        proxy in front of it: testbed/tcpproxy; a host other than loopback must be one of
        the certificate's `sans`)."""
        path = self.root / f"kubeconfig-{user}-{host}-{port or self.port}.yaml"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {
                "server": f"https://{host}:{port or self.port}",
                "certificate-authority": str(self.ca.cert)}}],
            "users": [{"name": user, "user": {"token": self.tokens[user]}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
        }))
        return path

    def request(self, method: str, path: str, body: object = None, *, user: str = ADMIN,
                timeout: float = 10.0, content_type: str = "application/json",
                ) -> tuple[int, Any]:
        """One request as `user`, by plain HTTP (independent of the code under test): the
        status and the decoded JSON body (the text when it is not JSON)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.tokens[user]}", "Content-Type": content_type,
            "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.tls) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def must(self, method: str, path: str, body: object = None, **kwargs: Any) -> Any:
        """`request`, which must succeed (2xx): its body."""
        status, out = self.request(method, path, body, **kwargs)
        if not 200 <= status < 300:
            raise AssertionError(f"{method} {path}: {status} {out}")
        return out

    def __enter__(self) -> KubeApiServer:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

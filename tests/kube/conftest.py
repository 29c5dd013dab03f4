"""Fixtures of the reflector tests: a real kube-apiserver (testbed/kube) on an etcd of its own,
the shipped ClusterRole (k8s/base/rbac.yaml) bound to the token user `reflector` and nothing
else, and KubeStates run as that user, always stopped.

The API server comes from VSWITCH_TEST_KUBE_APISERVER; tests that need it skip with the reason
when it is unset. Their etcd is not the session's: the 410 tests compact it, and compaction is
etcd-wide. It sends watch progress notifications every second, so the API server's watch cache
follows etcd's revision and its bookmarks carry news (etcd's default is every 10 minutes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from agent.kube.reflector import KubeState
from testbed.etcd import EtcdServer
from testbed.kube import ENV, KubeApiServer, binary

RBAC = Path(__file__).resolve().parents[2] / "k8s" / "base" / "rbac.yaml"
USER = "reflector"
PROGRESS = ("--experimental-watch-progress-notify-interval=1s",)

needs_apiserver = pytest.mark.skipif(
    binary() is None, reason=f"{ENV} is unset: no kube-apiserver binary to run the reflector "
    "against (e.g. $KUBE_BIN/kube-apiserver, built from Kubernetes v1.28)")


def shipped_role() -> dict[str, Any]:
    (role,) = [d for d in yaml.safe_load_all(RBAC.read_text())
               if d and d["kind"] == "ClusterRole"]
    return dict(role)


def bind_shipped_role(api: KubeApiServer, user: str = USER) -> None:
    """The ClusterRole exactly as shipped, bound to `user` (a token user: the binding in
    rbac.yaml names the DaemonSet's ServiceAccount, which only a pod can be)."""
    role = shipped_role()
    api.must("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    api.must("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "metadata": {"name": f"{role['metadata']['name']}-{user}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": role["metadata"]["name"]},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})


def start_apiserver(etcd: EtcdServer, **kwargs: Any) -> KubeApiServer:
    path = binary()
    assert path is not None
    api = KubeApiServer(path, etcd.endpoints, users=(USER,), **kwargs).__enter__()
    try:
        bind_shipped_role(api)
    except BaseException:
        api.close()
        raise
    return api


@pytest.fixture(scope="module")
def kube_etcd() -> Iterator[EtcdServer]:
    with EtcdServer(extra=PROGRESS) as etcd:
        yield etcd


@pytest.fixture(scope="module")
def apiserver(kube_etcd: EtcdServer) -> Iterator[KubeApiServer]:
    api = start_apiserver(kube_etcd)
    try:
        yield api
    finally:
        api.close()


class Changes:
    """What on_change was told, in order; thread-safe (the watch threads call it)."""

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self._cond = threading.Condition()

    def __call__(self, kind: str) -> None:
        with self._cond:
            self.kinds.append(kind)
            self._cond.notify_all()

    def count(self, kind: str) -> int:
        with self._cond:
            return self.kinds.count(kind)


@dataclass
class Run:
    """A KubeState under test, its metrics registry and what its on_change was told."""

    state: KubeState
    registry: CollectorRegistry
    changes: Changes

    def lists(self, kind: str) -> float:
        return self.registry.get_sample_value("vswitch_cni_kube_lists_total",
                                              {"kind": kind}) or 0.0

    def refused(self, kind: str) -> float:
        return self.registry.get_sample_value("vswitch_cni_kube_refused_objects_total",
                                              {"kind": kind}) or 0.0


RunFactory = Callable[..., Run]


@pytest.fixture
def make_state(apiserver: KubeApiServer) -> Iterator[RunFactory]:
    """make_state(port=None, start=True, server=None, **KubeState kwargs): a KubeState as
    `reflector` of `server` (default: the module's), through a proxy on `port` when given;
    every one is stopped at the end."""
    made: list[KubeState] = []

    def make(port: int | None = None, start: bool = True, server: KubeApiServer | None = None,
             **kwargs: Any) -> Run:
        changes, registry = Changes(), CollectorRegistry()
        options = {"backoff": (0.1, 0.5), **kwargs}  # quick retries: tests wait for them
        kubeconfig = (server or apiserver).kubeconfig(USER, port)
        run = Run(KubeState(str(kubeconfig), on_change=changes,
                            registry=registry, **options), registry, changes)
        made.append(run.state)
        if start:
            run.state.start()
        return run

    try:
        yield make
    finally:
        for state in made:
            state.stop()


def eventually(check: Callable[[], object], timeout: float = 15.0, what: str = "") -> None:
    """Waits (in the test, never in the code under test) until `check()` is truthy."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what or check}")
        time.sleep(0.05)

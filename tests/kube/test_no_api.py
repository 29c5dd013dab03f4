"""The reflector with no API server to talk to, offline (runs everywhere).

Test plan:
- no config: a kubeconfig that is not there, or no in-cluster service account -> KubeError at
  construction, naming what is missing; `ServiceTranslation: vpp` without any API is refused
  at start (InvalidConfig naming the key), while NetworkPolicy alone is just off;
- an API server that refuses connections: never synced, `error` says why for every kind, the
  caches stay empty, pod() answers None within its bound, stop() is quick and leaves no thread.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml

from agent.app.config import parse
from agent.app.kube_side import KubeSide
from agent.infra.metrics import Metrics
from agent.kube.objects import KubeError
from agent.kube.reflector import KubeState
from agent.model.errors import InvalidConfig
from ipam import node_networks
from testbed.etcd import free_port
from testbed.pki import Pki


def test_no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(KubeError, match=r"nowhere\.yaml"):
        KubeState(str(tmp_path / "nowhere.yaml"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeError, match="in-cluster service account"):
        KubeState(None)


def test_service_translation_without_an_api_is_refused() -> None:
    cfg = parse({"NodeName": "n", "Dataplane": "vpp", "ServiceTranslation": "vpp"})
    networks = node_networks(cfg.ipam, 1)
    with pytest.raises(InvalidConfig, match="ServiceTranslation: vpp needs the Kubernetes API"):
        KubeSide.build(cfg, networks, "", None, list, Metrics(), env={})
    off = parse({"NodeName": "n", "Dataplane": "vpp"})
    assert KubeSide.build(off, networks, "", None, list, Metrics(), env={}) is None


def test_an_api_server_that_is_not_there(tmp_path: Path) -> None:
    ca = Pki(tmp_path / "pki").ca("ca")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{free_port()}",
                                               "certificate-authority": str(ca.cert)}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    state = KubeState(str(kubeconfig), get_timeout=1.0, backoff=(0.05, 0.2))
    state.start()
    try:
        assert not state.wait_synced(0.5)
        kinds = ("pods", "namespaces", "nodes", "networkpolicies")
        deadline = time.monotonic() + 10
        while not all(f"{k}: " in state.error for k in kinds) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(f"{k}: " in state.error for k in kinds), state.error
        assert "onnect" in state.error  # connection refused, as httpx says it
        assert state.pods() == {} and state.nodes() == {} and not state.synced
        started = time.monotonic()
        assert state.pod("web", "p") is None
        assert time.monotonic() - started < 1.5
    finally:
        started = time.monotonic()
        state.stop()
    assert time.monotonic() - started < 2.0
    assert [t.name for t in threading.enumerate() if t.name.startswith("kube-")] == []

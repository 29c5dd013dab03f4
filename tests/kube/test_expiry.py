"""410 Gone against a real kube-apiserver (skipped without VSWITCH_TEST_KUBE_APISERVER).

Test plan:
Both on a server without a watch cache (every watch an etcd watch, so that an etcd compaction
expires revisions at once; with the cache, "too old" depends on the cache's window):
- a watch from a compacted resourceVersion ends in WatchExpired (the server says so as the
  HTTP status or as an ERROR event: either maps to it);
- the whole reflector: etcd compacted past the revision a kind's watch resumes from after its
  routine end -> 410 -> that kind relists (counted, logged), and the cache goes on following.
"""

from __future__ import annotations

import base64
import json
import logging
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from agent.infra.watchstream import WatchExpired
from agent.kube.api import KubeApi
from agent.kube.objects import PODS
from agent.kube.refusals import Refusals
from agent.kube.source import KubeSource
from testbed.etcd import EtcdServer
from testbed.kube import KubeApiServer
from tests.kube.conftest import USER, RunFactory, eventually, needs_apiserver, start_apiserver

pytestmark = needs_apiserver


def etcd_call(endpoint: str, path: str, body: dict[str, object]) -> dict[str, object]:
    req = urllib.request.Request(f"{endpoint}{path}", data=json.dumps(body).encode(),
                                 method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        out: dict[str, object] = json.loads(resp.read())
        return out


def compact_now(endpoint: str) -> int:
    """Compacts etcd at its current revision (its JSON gateway); returns that revision."""
    head = etcd_call(endpoint, "/v3/kv/range", {"key": base64.b64encode(b"-").decode()})
    header = head["header"]
    assert isinstance(header, dict)
    revision = int(header["revision"])
    etcd_call(endpoint, "/v3/kv/compaction", {"revision": revision, "physical": True})
    return revision


def moved_and_compacted(api: KubeApiServer) -> None:
    """Two changes (the server watches from the revision after the one it is given, which
    may be the compacted one itself), then etcd compacted at its head."""
    for _ in range(2):
        api.must("POST", "/api/v1/namespaces", {"metadata": {"generateName": "moved-"}})
    compact_now(api.etcd_endpoints[0])


@pytest.fixture(scope="module")
def uncached_apiserver() -> Iterator[KubeApiServer]:
    with EtcdServer() as etcd:
        api = start_apiserver(etcd, watch_cache=False)
        try:
            yield api
        finally:
            api.close()


def test_a_watch_from_a_compacted_revision_expires(uncached_apiserver: KubeApiServer) -> None:
    moved_and_compacted(uncached_apiserver)
    api = KubeApi(str(uncached_apiserver.kubeconfig(USER)))
    refusals = Refusals(Counter("refused", "", ["kind"], registry=CollectorRegistry()))
    source = KubeSource(api, PODS, refusals, watch_timeout=5)
    try:
        with pytest.raises(WatchExpired, match="410"):
            stream = source.watch("1")
            try:
                while True:
                    stream.next(5.0)
            finally:
                stream.close()
    finally:
        source.join(5)
        api.close()


def test_a_compacted_revision_relists(uncached_apiserver: KubeApiServer, make_state: RunFactory,
                                      caplog: pytest.LogCaptureFixture) -> None:
    api = uncached_apiserver
    caplog.set_level(logging.WARNING, logger="agent.kube")
    run = make_state(server=api, watch_timeout=1)  # routine ends every 1-2 s: resumes
    assert run.state.wait_synced(20)
    api.must("POST", "/api/v1/namespaces", {"metadata": {"name": "moved"}})
    moved_and_compacted(api)
    eventually(lambda: run.lists("pods") >= 2, timeout=20, what="the pods' relist after 410")
    assert any("410" in r.getMessage() and "kube-pods" in r.getMessage()
               for r in caplog.records)
    api.must("POST", "/api/v1/namespaces/moved/pods", {
        "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
    eventually(lambda: ("moved", "p") in run.state.pods())

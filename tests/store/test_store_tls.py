"""The store against a real etcd over TLS with client certificates (Debian's etcd 3.4, started
with --client-cert-auth --trusted-ca-file --cert-file --key-file on an https:// port).

Plan (one PKI and two TLS etcds per module, testbed/etcd_pki.py and testbed/etcd.py; the second etcd
presents a server certificate for another name):
- with the CA and its client certificate the store claims node IDs, writes and reads pods, and
  the node registry (its own connection) publishes and streams a watch event: TLS everywhere.
- each failure is an EtcdTLSFailure (CNI 11, retryable) that names it: a client without a
  certificate, a client certificate of a CA etcd does not trust, a wrong CA (certificate verify
  failed), a server certificate for another name (hostname mismatch), TLS to a plain-http etcd;
  every call in a row names it, also those that find the member still marked failed and make no
  call of their own.
- refused at construction (InvalidConfig, no connection): https:// without TLS files, TLS files
  for http://, http:// and https:// mixed, a bad file (named).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.infra.watchstream import Put
from agent.model.errors import EtcdTLSFailure, InvalidConfig, TryAgainLater
from agent.model.node import NodeInfo
from agent.model.pod import PodKey, PodRecord
from agent.state.etcd_tls import EtcdTLS
from agent.state.registry import Registry
from agent.state.store import Store
from testbed.etcd import EtcdServer, ServerTLS
from testbed.pki import EtcdPki


@pytest.fixture(scope="module")
def misnamed_etcd(etcd_pki: EtcdPki) -> Iterator[EtcdServer]:
    misnamed = ServerTLS(etcd_pki.misnamed.cert, etcd_pki.misnamed.key, etcd_pki.ca.cert)
    with EtcdServer(misnamed) as server:
        yield server


def client_tls(etcd_pki: EtcdPki) -> EtcdTLS:
    return EtcdTLS(str(etcd_pki.ca.cert), str(etcd_pki.client.cert), str(etcd_pki.client.key))


def tls_failure(endpoints: list[str], prefix: str, tls: EtcdTLS) -> EtcdTLSFailure:
    store = Store(endpoints, prefix, 2.0, tls)
    try:
        with pytest.raises(EtcdTLSFailure) as info:
            store.claim_node_id("n1", 10)
    finally:
        store.close()
    assert info.value.code == 11
    assert "TLS handshake failed" in info.value.msg and "unreachable" not in str(info.value)
    return info.value


def test_with_its_client_certificate_the_store_works(
        tls_etcd: EtcdServer, etcd_pki: EtcdPki, prefix: str) -> None:
    assert tls_etcd.endpoints[0].startswith("https://")
    store = Store(tls_etcd.endpoints, prefix, 2.0, client_tls(etcd_pki))
    try:
        assert store.claim_node_id("n1", 10) == 1
        record = PodRecord(container_id="c1", ifname="eth0", netns="/proc/1/ns/net",
                           addresses=["10.1.1.2/32"], gateways=["10.1.1.1"], state="ready")
        store.put_pod(1, record)
        assert store.get_pod(1, PodKey("c1", "eth0")) == record
        assert list(store.list_allocations(1)) == ["10.1.1.2"]
    finally:
        store.close()


def test_the_registry_watch_streams_over_tls(
        tls_etcd: EtcdServer, etcd_pki: EtcdPki, prefix: str) -> None:
    registry = Registry(Store(tls_etcd.endpoints, prefix, 2.0, client_tls(etcd_pki)))
    try:
        _, revision = registry.entries()
        watch = registry.watch(revision)
        info = NodeInfo(name="n7", node_id=7, node_ip="192.0.2.7", vxlan_ip="192.168.30.7",
                        pod_subnets=("10.1.7.0/24",), vpp_host_subnet="172.30.7.0/24")
        registry.publish(info)
        item = watch.next(timeout=30)
        assert isinstance(item, Put) and item.value == info
        watch.close()
    finally:
        registry.close()


def test_a_client_without_a_certificate_is_refused(
        tls_etcd: EtcdServer, etcd_pki: EtcdPki, prefix: str) -> None:
    failure = tls_failure(tls_etcd.endpoints, prefix, EtcdTLS(str(etcd_pki.ca.cert)))
    assert "demands a client certificate" in failure.details
    assert "EtcdCertFile" in failure.details


def test_a_client_certificate_etcd_does_not_trust_is_refused(
        tls_etcd: EtcdServer, etcd_pki: EtcdPki, prefix: str) -> None:
    tls = EtcdTLS(str(etcd_pki.ca.cert), str(etcd_pki.stranger.cert), str(etcd_pki.stranger.key))
    failure = tls_failure(tls_etcd.endpoints, prefix, tls)
    assert f"refused this client's certificate (EtcdCertFile {etcd_pki.stranger.cert})" in \
        failure.details


def test_a_wrong_ca_is_named(tls_etcd: EtcdServer, etcd_pki: EtcdPki, prefix: str) -> None:
    tls = EtcdTLS(str(etcd_pki.other_ca.cert), str(etcd_pki.client.cert), str(etcd_pki.client.key))
    failure = tls_failure(tls_etcd.endpoints, prefix, tls)
    assert "certificate verify failed" in failure.details
    assert f"EtcdCAFile {etcd_pki.other_ca.cert}" in failure.details
    assert tls_etcd.endpoints[0] in failure.details


def test_a_server_certificate_for_another_name_is_a_hostname_mismatch(
        misnamed_etcd: EtcdServer, etcd_pki: EtcdPki, prefix: str) -> None:
    failure = tls_failure(misnamed_etcd.endpoints, prefix, client_tls(etcd_pki))
    assert "hostname mismatch" in failure.details
    assert f"{misnamed_etcd.endpoints[0]} is not for 127.0.0.1" in failure.details


def test_tls_to_a_plain_etcd_is_named(
        etcd_endpoints: list[str], etcd_pki: EtcdPki, prefix: str) -> None:
    plain = etcd_endpoints[0].replace("http://", "https://")
    failure = tls_failure([plain], prefix, client_tls(etcd_pki))
    assert "does it serve TLS on that port?" in failure.details


def test_every_call_names_the_tls_failure(
        tls_etcd: EtcdServer, etcd_pki: EtcdPki, prefix: str) -> None:
    """After a failure pyetcd marks the member failed for a moment and raises, for the calls in
    that moment, an error of its own with no gRPC details: they name the failure too."""
    tls = EtcdTLS(str(etcd_pki.other_ca.cert), str(etcd_pki.client.cert), str(etcd_pki.client.key))
    store = Store(tls_etcd.endpoints, prefix, 2.0, tls)
    try:
        for _ in range(5):
            with pytest.raises(EtcdTLSFailure, match="certificate verify failed"):
                store.ping()
    finally:
        store.close()


def test_an_unreachable_tls_etcd_is_not_called_a_tls_failure(
        etcd_pki: EtcdPki, prefix: str) -> None:
    from testbed.etcd import free_port

    store = Store([f"https://127.0.0.1:{free_port()}"], prefix, 2.0, client_tls(etcd_pki))
    try:
        for _ in range(3):
            with pytest.raises(TryAgainLater) as info:
                store.ping()
            assert not isinstance(info.value, EtcdTLSFailure)
            assert "etcd is unreachable" in info.value.msg
    finally:
        store.close()


def test_endpoints_and_files_that_cannot_work_are_refused_before_connecting(
        etcd_pki: EtcdPki, tmp_path: Path) -> None:
    tls = client_tls(etcd_pki)
    cases: list[tuple[list[str], EtcdTLS | None, str]] = [
        (["https://127.0.0.1:2379"], None, "is https:// but no TLS files are given"),
        (["http://127.0.0.1:2379"], tls, "TLS files given for http:// endpoints"),
        (["https://127.0.0.1:2379", "http://127.0.0.1:2380"], tls, "mix http:// and https://"),
        (["https://127.0.0.1:2379"], EtcdTLS(str(tmp_path / "nope.crt")),
         f"EtcdCAFile {tmp_path / 'nope.crt'}: cannot read"),
        (["https://127.0.0.1:2379"], EtcdTLS(str(etcd_pki.ca.cert), str(etcd_pki.client.cert),
                                             str(etcd_pki.stranger.key)),
         f"EtcdKeyFile {etcd_pki.stranger.key}: the private key does not belong"),
    ]
    for endpoints, given, reason in cases:
        with pytest.raises(InvalidConfig) as info:
            Store(endpoints, "/x/", 2.0, given)
        assert reason in str(info.value), (endpoints, given)
